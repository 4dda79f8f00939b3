package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/schema"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// addHintsFlag adds --hints: how the API and the dispatchers tell each other
// that work waits (see package notify).
func addHintsFlag(f *pflag.FlagSet, mode *string) {
	f.StringVar(mode, "hints", envString("ORCHARD_HINTS", "local"),
		"hints of waiting work: off (every wait polls), local (within this process) or postgres (LISTEN/NOTIFY between processes; PostgreSQL only) (env ORCHARD_HINTS)")
}

// hintedPolls sets the API's long-poll waits for when the dispatchers'
// hints reach the API (orchard dev with hints on, or --hints postgres): a
// wait then ends by a hint, and its store polls only stand in for a lost
// one, so they start at a quarter second instead of the 5 ms that a wait
// without hints needs to answer soon; a WaitForCompletion's, at a second.
func hintedPolls(cfg *api.Config) {
	cfg.MinPoll, cfg.MaxPoll = 250*time.Millisecond, time.Second
	cfg.Hinted = true
}

// hintedDispatcherPolls sets the idle dispatcher loops' waits for when the
// API's hints reach them (the same cases): a start, an event or a task's
// result wakes a loop, so its polls are for lost hints and for timers,
// which are not hinted. A loop then goes from its last batch to 50 ms at
// once instead of doubling from 2 ms; the default 100 ms ceiling stays, so
// a timer is found no later than without hints. A loop whose batch was not
// full waits for a hint rather than fetching again at once.
func hintedDispatcherPolls(cfg *dispatcher.Config) {
	cfg.MinPoll = 50 * time.Millisecond
	cfg.Hinted = true
}

// openHints returns the notifier --hints names, and what closes it.
func openHints(ctx context.Context, pool *pgxpool.Pool, mode string) (notify.Notifier, func(), error) {
	switch mode {
	case "off":
		return notify.Off{}, func() {}, nil
	case "local":
		return notify.NewLocal(), func() {}, nil
	case "postgres":
		cockroach, err := schema.IsCockroach(ctx, pool)
		if err != nil {
			return nil, nil, err
		}
		if cockroach {
			return nil, nil, configError{errors.New("--hints postgres: CockroachDB has no LISTEN/NOTIFY; use local")}
		}
		p, err := notify.NewPostgres(ctx, pool, slog.Default())
		if err != nil {
			return nil, nil, err
		}
		return p, p.Close, nil
	default:
		return nil, nil, configError{fmt.Errorf("--hints (ORCHARD_HINTS): %q is not off, local or postgres", mode)}
	}
}
