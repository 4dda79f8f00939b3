package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/orchardhq/orchard/internal/telemetry"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/schema"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// hintsFlags are --hints (how the API and the dispatchers tell each other
// that work waits, see package notify) and, for --hints members, where this
// process takes the others' hints and the secret they share.
type hintsFlags struct {
	mode, address, secret string
}

func addHintsFlags(f *pflag.FlagSet, h *hintsFlags) {
	f.StringVar(&h.mode, "hints", envString("ORCHARD_HINTS", "local"),
		"hints of waiting work: off (every wait polls), local (within this process), postgres (LISTEN/NOTIFY between processes; PostgreSQL only) or members (calls between the processes, which register in the database; any database) (env ORCHARD_HINTS)")
	f.StringVar(&h.address, "hints-address", envString("ORCHARD_HINTS_ADDRESS", ""),
		"with --hints members: host:port where the other processes reach this one's ops endpoint (env ORCHARD_HINTS_ADDRESS; empty: the --ops-addr host, or if it names none, the address this process reaches the database from, on the --ops-addr port)")
	f.StringVar(&h.secret, "hints-secret", envString("ORCHARD_HINTS_SECRET", ""),
		"with --hints members: the secret every process of the deployment shares (env ORCHARD_HINTS_SECRET)")
}

// acrossProcesses reports whether the hints reach other processes.
func (h hintsFlags) acrossProcesses() bool { return h.mode == "postgres" || h.mode == "members" }

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

// hints is what --hints opened: the notifier, what closes it, and for
// --hints members the receiver of the other processes' hints, which the ops
// endpoint serves.
type hints struct {
	notify.Notifier
	close    func()
	receiver []opsRoute
}

// openHints opens the notifier --hints names. waits are the kinds of hints
// this process has waiters for; opsAddr is where its ops endpoint listens.
func openHints(ctx context.Context, tel *telemetry.Telemetry, pool *pgxpool.Pool, h hintsFlags, opsAddr string, waits ...notify.Kind) (hints, error) {
	none := func() {}
	switch h.mode {
	case "off":
		return hints{Notifier: notify.Off{}, close: none}, nil
	case "local":
		return hints{Notifier: notify.NewLocal(), close: none}, nil
	case "postgres":
		cockroach, err := schema.IsCockroach(ctx, pool)
		if err != nil {
			return hints{}, err
		}
		if cockroach {
			return hints{}, configError{errors.New("--hints postgres: CockroachDB has no LISTEN/NOTIFY; use members")}
		}
		p, err := notify.NewPostgres(ctx, pool, slog.Default())
		if err != nil {
			return hints{}, err
		}
		return hints{Notifier: p, close: p.Close}, nil
	case "members":
		if opsAddr == "" {
			return hints{}, configError{errors.New("--hints members: the other processes' hints come to the ops endpoint; set --ops-addr")}
		}
		if len(h.secret) < 16 {
			return hints{}, configError{errors.New("--hints members: set --hints-secret (ORCHARD_HINTS_SECRET), at least 16 characters, the same in every process")}
		}
		address, err := hintsAddress(ctx, pool, h.address, opsAddr)
		if err != nil {
			return hints{}, err
		}
		m, err := notify.NewMembers(ctx, pool, notify.MembersConfig{
			Address: address, Waits: waits, Key: deriveKey(h.secret, "hints"), MeterProvider: tel.MeterProvider,
		})
		if err != nil {
			return hints{}, err
		}
		path, handler := m.Handler()
		return hints{Notifier: m, close: m.Close, receiver: []opsRoute{{path, handler}}}, nil
	default:
		return hints{}, configError{fmt.Errorf("--hints (ORCHARD_HINTS): %q is not off, local, postgres or members", h.mode)}
	}
}

// hintsAddress is where the other processes reach this one's ops endpoint:
// --hints-address; or the ops endpoint's own address when it names a host;
// or, for an unspecified host (":9465", "0.0.0.0:9465"), the address this
// process reaches the database from (a pod's IP, in Kubernetes), on the
// ops port: the members share the database, so they reach each other
// there too, and nothing per pod needs configuring.
func hintsAddress(ctx context.Context, pool *pgxpool.Pool, address, opsAddr string) (string, error) {
	if address != "" {
		return address, nil
	}
	host, port, err := net.SplitHostPort(opsAddr)
	if err != nil {
		return "", configError{fmt.Errorf("--ops-addr %q: %w", opsAddr, err)}
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return opsAddr, nil
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("hints: the address to advertise: %w", err)
	}
	defer conn.Release()
	host = "127.0.0.1" // a Unix socket: the database, and so the members, are on this host
	if tcp, ok := conn.Conn().PgConn().Conn().LocalAddr().(*net.TCPAddr); ok {
		host = tcp.IP.String()
	}
	return net.JoinHostPort(host, port), nil
}
