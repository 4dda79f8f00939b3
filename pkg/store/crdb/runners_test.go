package crdb

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
)

// batchRunner is a store.LeasedRunner that records each call's instances,
// reading those it gets unread.
type batchRunner struct {
	s     *Store
	mu    sync.Mutex
	calls [][]*store.OrchestrationItem
	err   error // ReadLeased's first
}

func (r *batchRunner) RunLeased(ctx context.Context, items []*store.OrchestrationItem, unread []store.OrchestrationLease) {
	read, err := r.s.ReadLeased(ctx, unread)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = cmp.Or(r.err, err)
	r.calls = append(r.calls, append(items, read...))
}

// ids returns the instance ids of each call's items.
func (r *batchRunner) ids(t *testing.T) [][]string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NoError(t, r.err)
	var ids [][]string
	for _, items := range r.calls {
		var call []string
		for _, it := range items {
			call = append(call, it.Lease.InstanceID)
		}
		slices.Sort(call)
		ids = append(ids, call)
	}
	return ids
}

func runnerLease(r store.LeasedRunner) *store.EagerLease {
	return &store.EagerLease{Token: uuid.NewString(), Duration: time.Minute, Runner: r}
}

// leasedUntil reads an instance's lease: its token and end (0: free).
func leasedUntil(t *testing.T, s *Store, tenant, id string) (string, int64) {
	t.Helper()
	var token string
	var until int64
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT lease_token::TEXT, leased_until FROM instance_leases
		WHERE tenant_id = $1 AND instance_id = $2`, tenant, id).Scan(&token, &until))
	return token, until
}

// Eager starts that join a batch lease their instances in it, under the
// batch's token, and each runner gets its own instances in one call, after
// the commit and before the starts return; the batch's other starts leave
// theirs free and due.
func TestEagerStartsOfABatchGoToTheirRunners(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	h := holdFirstStartBatch(s)
	start := func(id string, e *store.EagerLease) chan error {
		return startAsync(ctx, s, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: id, Name: "n",
			Start: store.Message{Kind: "start"}, Eager: e})
	}
	first := start("lead", nil)
	<-h.entered
	a, b := &batchRunner{s: s}, &batchRunner{s: s}
	leases := map[string]*store.EagerLease{"a1": runnerLease(a), "a2": runnerLease(a), "b1": runnerLease(b)}
	var waiting []chan error
	for i, id := range []string{"a1", "a2", "b1", "plain"} {
		waiting = append(waiting, start(id, leases[id]))
		waitPending(t, func() int { return pendingStarts(s, "acme") }, i+1)
	}
	close(h.release)
	require.NoError(t, <-first)
	for _, w := range waiting {
		require.NoError(t, <-w)
	}
	require.Equal(t, [][]string{{"lead"}, {"a1", "a2", "b1", "plain"}}, h.sent())
	require.Equal(t, [][]string{{"a1", "a2"}}, a.ids(t))
	require.Equal(t, [][]string{{"b1"}}, b.ids(t))
	for id, e := range leases {
		require.True(t, e.Held, id)
	}

	// One token for the batch's leases, none of the callers'.
	token := a.calls[0][0].Lease.Token
	for _, it := range append(slices.Clone(a.calls[0]), b.calls[0]...) {
		got, until := leasedUntil(t, s, "acme", it.Lease.InstanceID)
		require.Equal(t, token, got)
		require.Equal(t, it.Lease.ExpiresAt.UnixMilli(), until)
		require.NotEqual(t, leases[it.Lease.InstanceID].Token, got)
		require.Len(t, it.Messages, 1)
		require.Equal(t, "start", it.Messages[0].Kind)
		require.Equal(t, int64(1), it.Claims)
	}
	var due []string
	for {
		item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "acme", LeaseDuration: time.Minute})
		require.NoError(t, err)
		if item == nil {
			break
		}
		due = append(due, item.Lease.InstanceID)
	}
	require.ElementsMatch(t, []string{"lead", "plain"}, due, "the instances a claim finds")
}

// Eager completions that join a batch lease their free instances in it:
// two completions of one instance hand it over once, with both results,
// and a completion that took no effect leases nothing. No instance stays
// leased that no runner got.
func TestEagerCompletionsOfABatchGoToTheirRunners(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	lead := scheduleTasks(t, s, "acme", "lead", 1)
	two := scheduleTasks(t, s, "acme", "two", 2)
	one := scheduleTasks(t, s, "acme", "one", 1)
	lost := scheduleTasks(t, s, "acme", "lost", 1)

	h := holdFirstCompletionBatch(s)
	first := completeAsync(ctx, s, lead[0].Lease, "lead")
	<-h.entered
	r := &batchRunner{s: s}
	stolen := lost[0].Lease
	stolen.Token = uuid.NewString()
	leases := []*store.EagerLease{runnerLease(r), runnerLease(r), runnerLease(r), runnerLease(r)}
	var waiting []chan error
	for i, lease := range []store.WorkLease{two[0].Lease, two[1].Lease, one[0].Lease, stolen} {
		done := make(chan error, 1)
		go func() {
			done <- s.AckWorkItem(ctx, &store.AckWorkItemParams{Lease: lease, Eager: leases[i],
				Result: &store.Message{Kind: "done", Payload: []byte{byte(i)}}})
		}()
		waiting = append(waiting, done)
		waitPending(t, func() int { return pendingIn(s.completions, "acme") }, i+1)
	}
	close(h.release)
	require.NoError(t, <-first)
	for i, w := range waiting[:3] {
		require.NoError(t, <-w, i)
	}
	require.ErrorIs(t, <-waiting[3], store.ErrLeaseLost)
	require.Len(t, h.sent(), 2)

	require.Equal(t, [][]string{{"one", "two"}}, r.ids(t))
	require.True(t, leases[0].Held, "the first completion of an instance holds it")
	require.False(t, leases[1].Held, "the second completion of an instance holds it too")
	require.True(t, leases[2].Held)
	require.False(t, leases[3].Held, "a lost task's completion holds its instance")
	for _, it := range r.calls[0] {
		want := map[string]int{"two": 2, "one": 1}[it.Lease.InstanceID]
		require.Len(t, it.Messages, want, it.Lease.InstanceID)
		// Acked as a claim's item, it holds.
		ids := make([]string, len(it.Messages))
		for i, m := range it.Messages {
			ids[i] = m.ID
		}
		require.NoError(t, s.AckOrchestrationItem(ctx, &store.AckOrchestrationItemParams{Lease: it.Lease, ExecutionID: 1,
			Status: store.StatusRunning, MessageIDs: ids}))
	}
	_, until := leasedUntil(t, s, "acme", "lost")
	require.Zero(t, until, "an instance whose task was lost stayed leased")
	item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "acme", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Equal(t, "lead", item.Lease.InstanceID, "a plain completion's instance is due")
	none, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "acme", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Nil(t, none)
	requireInvariants(t, s)
}
