package chaos

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/orchardhq/orchard/loadtest"
	"github.com/orchardhq/orchard/pkg/sdk"
)

// WorkerConfig is one worker process of a campaign.
type WorkerConfig struct {
	API, Token, Identity string
	Concurrency          int
	Lease                time.Duration
}

// RunWorker runs the load test's activity worker (loadtest.NewEchoWorker)
// against the API until ctx ends: the campaign runs it as a process of its
// own, to kill it.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client := sdk.NewClient(cfg.API, sdk.WithToken(strings.TrimSpace(cfg.Token)))
	w := loadtest.NewEchoWorker(client, cfg.Identity, cfg.Concurrency,
		sdk.WithLeaseDuration(cfg.Lease), sdk.WithLogger(logger), sdk.WithStopTimeout(2*time.Second))
	return w.Run(ctx)
}
