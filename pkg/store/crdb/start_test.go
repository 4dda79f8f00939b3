package crdb

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
)

// Starts of distinct instances share no row (the status counters are
// sharded, and a counter's increment waits its turn rather than failing),
// so 32 clients starting at once never make each other retry, let alone
// run out of attempts.
func TestConcurrentStartsOfDistinctIDsNeverConflict(t *testing.T) {
	t.Parallel()
	const clients, each = 32, 20
	s := New(testdb.Pool(t, clients), Options{MaxAttempts: 1})
	var mu sync.Mutex
	var retried []error
	s.onRetry = func(_ int, err error) {
		mu.Lock()
		defer mu.Unlock()
		retried = append(retried, err)
	}
	var started atomic.Int64
	g, ctx := errgroup.WithContext(t.Context())
	for c := range clients {
		g.Go(func() error {
			for i := range each {
				_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{
					TenantID: "acme", InstanceID: fmt.Sprintf("c%02d-%03d", c, i), Name: "n",
					Tags: map[string]string{"client": fmt.Sprint(c)}, Start: store.Message{Kind: "start"},
				})
				if err != nil {
					return err
				}
				started.Add(1)
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.Empty(t, retried, "starts of distinct ids conflicted")
	require.Equal(t, int64(clients*each), started.Load())
	counts, err := s.CountInstances(t.Context(), &store.CountInstancesParams{TenantID: "acme", Filter: store.InstanceFilter{Statuses: []store.Status{store.StatusRunning}}})
	require.NoError(t, err)
	require.Equal(t, int64(clients*each), counts.Total)
}

// The writes of a process take the counter shards in turn, so that writes
// in flight at once hold different shards' rows: any countShards picks in a
// row name every shard. Not parallel: a concurrent pick would take a turn.
func TestCountShardsTakeTurns(t *testing.T) {
	seen := map[int64]bool{}
	for range countShards {
		seen[countShard()] = true
	}
	require.Len(t, seen, countShards)
}
