package sdk_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testlog"
	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/services/api"
)

// A database restart (a fast shutdown: sessions end with 57P01, then
// connections are refused until it is back) under a worker with tasks in
// hand: the API answers Unavailable, never Internal; the worker's reports
// are retried across the restart, so every activity runs exactly once and
// every instance completes.
func TestDatabaseRestartUnderAWorker(t *testing.T) {
	t.Parallel()
	db := testdb.NewRestartable(t)
	var requests testlog.Buffer
	s := newSystemWith(t, testsystem.Options{Pool: db.Pool(20)}, func(_ *testsystem.System, cfg *api.Config) {
		// The request log: one line per call, with its code.
		cfg.Logger = slog.New(slog.NewTextHandler(&requests, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	patient := sdk.RetryPolicy{MaxAttempts: 1000, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	admin := sdk.NewClient(s.URL, sdk.WithToken(s.token(tenancy.RoleTenantAdmin)), sdk.WithRetryPolicy(patient))
	s.register(admin, testsystem.EchoDef)

	const n = 20
	var mu sync.Mutex
	runs := map[string]int{}
	inHand := make(chan struct{}, n)
	release := make(chan struct{})
	worker := sdk.NewWorker(sdk.NewClient(s.URL, sdk.WithToken(s.token(tenancy.RoleWorker)), sdk.WithRetryPolicy(patient)), "q",
		sdk.WithLogger(quiet()), sdk.WithPollWait(time.Second), sdk.WithConcurrency(n), sdk.WithLeaseDuration(time.Minute))
	sdk.Register(worker, "work", func(ctx context.Context, in string) (string, error) {
		mu.Lock()
		runs[in]++
		mu.Unlock()
		inHand <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return in, nil
	})
	startWorker(t, worker)

	c := sdk.NewClient(s.URL, sdk.WithToken(s.token(tenancy.RoleClient)), sdk.WithRetryPolicy(patient))
	ctx := t.Context()
	for i := range n {
		_, err := c.Start(ctx, "echo", fmt.Sprintf("i-%02d", i), sdk.WithInstanceID(fmt.Sprintf("i-%02d", i)))
		require.NoError(t, err)
	}
	// Every task is in a handler; the database goes away and comes back
	// while they finish, so their reports meet it down.
	for range n {
		select {
		case <-inHand:
		case <-ctx.Done():
			t.Fatal("the tasks never all reached the worker")
		}
	}
	db.Stop()
	close(release)
	db.Start()

	for i := range n {
		id := fmt.Sprintf("i-%02d", i)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		in, err := c.Wait(wctx, id)
		cancel()
		require.NoError(t, err, id)
		require.Equal(t, sdk.StatusCompleted, in.Status, id)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, n)
	for in, times := range runs {
		require.Equal(t, 1, times, "activity of %s ran again", in)
	}
	log := requests.String()
	require.Contains(t, log, "code=unavailable", "the restart was met by some call")
	require.NotContains(t, log, "code=internal", "a call answered Internal:\n%s", grepLines(log, "code=internal"))
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
