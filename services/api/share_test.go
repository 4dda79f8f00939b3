package api_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/services/api"
)

// heldCounts holds the busy tenant's CountInstances calls in the store until
// the test lets each go, and records the tenants of the calls that reach the
// store, in order.
type heldCounts struct {
	api.Store
	busy string
	let  chan struct{}

	mu      sync.Mutex
	reached []string
}

func (h *heldCounts) CountInstances(ctx context.Context, p *store.CountInstancesParams) (*store.CountInstancesResult, error) {
	h.mu.Lock()
	h.reached = append(h.reached, p.TenantID)
	h.mu.Unlock()
	if p.TenantID == h.busy {
		select {
		case <-h.let:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.Store.CountInstances(ctx, p)
}

func (h *heldCounts) reachedSoFar() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.reached)
}

// heldEnv is an env whose store holds the busy tenant's counts, with a
// share of the given size.
func heldEnv(t *testing.T, share *tenancy.FairShare) (*env, *heldCounts) {
	held := &heldCounts{busy: "busy", let: make(chan struct{})}
	e := newEnv(t, func(c *api.Config) {
		held.Store = c.Store
		c.Store = held
		c.CallShare = share
	})
	return e, held
}

// countAsync counts the caller's instances in a goroutine and reports the
// call's error on done.
func countAsync(ctx context.Context, c *clients, done chan<- error) {
	go func() {
		_, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
		done <- err
	}()
}

// TestCallsInFlightAreSharedFairly: with the process's calls in flight at
// their limit, all the busy tenant's, a quiet tenant's call waits for the
// next slot freed and takes it ahead of the busy tenant's calls waiting
// before it; calls beyond the limit never reach the store, and a long poll
// takes no slot.
func TestCallsInFlightAreSharedFairly(t *testing.T) {
	t.Parallel()
	share := tenancy.NewFairShare(2, 8, api.DefaultCallBytesWaiting)
	e, held := heldEnv(t, share)
	busy := e.all(e.tenant("busy", nil))
	quiet := e.all(e.tenant("quiet", nil))
	ctx := t.Context()
	busyDone, quietDone := make(chan error, 8), make(chan error, 1)
	for range 2 {
		countAsync(ctx, busy, busyDone)
	}
	require.Eventually(t, func() bool { return len(held.reachedSoFar()) == 2 }, 10*time.Second, time.Millisecond)
	for range 3 {
		countAsync(ctx, busy, busyDone)
	}
	require.Eventually(t, func() bool { return share.Waiting("busy") == 3 }, 10*time.Second, time.Millisecond)
	countAsync(ctx, quiet, quietDone)
	require.Eventually(t, func() bool { return share.Waiting("quiet") == 1 }, 10*time.Second, time.Millisecond)
	require.Len(t, held.reachedSoFar(), 2, "calls beyond the limit wait before the store")

	// A long poll is not held back by the share.
	polled, err := quiet.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(0)}))
	require.NoError(t, err)
	require.Empty(t, polled.Msg.Tasks)

	held.let <- struct{}{}
	require.NoError(t, <-quietDone, "the quiet tenant's call got the slot freed")
	// The quiet call's slot, once it ended, went to a busy one.
	require.Equal(t, []string{"busy", "busy", "quiet"}, held.reachedSoFar()[:3])

	for range 4 {
		held.let <- struct{}{}
	}
	for range 5 {
		require.NoError(t, <-busyDone)
	}
	require.Zero(t, share.InFlight())
}

// TestCallsWaitingAreBounded: a tenant's calls beyond the share's bounds
// on its waiting calls are refused with ResourceExhausted, naming the
// bound: their count (calls_in_flight), or their requests' bytes
// (call_bytes_waiting), where a small request still waits.
func TestCallsWaitingAreBounded(t *testing.T) {
	t.Parallel()
	big := &orchardv1.InstanceFilter{InstanceIds: []string{strings.Repeat("a", 40), strings.Repeat("b", 40)}}
	for _, c := range []struct {
		name     string
		share    *tenancy.FairShare
		waiting  int
		refused  *orchardv1.InstanceFilter
		resource string
	}{
		{"count", tenancy.NewFairShare(1, 1, api.DefaultCallBytesWaiting), 1, nil, tenancy.ResourceCallsInFlight},
		{"bytes", tenancy.NewFairShare(1, 8, 64), 2, big, tenancy.ResourceCallBytesWaiting},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e, held := heldEnv(t, c.share)
			busy := e.all(e.tenant("busy", nil))
			ctx := t.Context()
			calls := 1 + c.waiting
			done := make(chan error, calls)
			for range calls {
				countAsync(ctx, busy, done)
			}
			require.Eventually(t, func() bool { return c.share.InFlight() == 1 && c.share.Waiting("busy") == c.waiting },
				10*time.Second, time.Millisecond)
			// Refused at once; should it wait instead, the deadline fails it.
			refuseCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := busy.client.CountInstances(refuseCtx, req(&orchardv1.CountInstancesRequest{Filter: c.refused}))
			requireCode(t, err, connect.CodeResourceExhausted, c.resource)
			for range calls {
				held.let <- struct{}{}
			}
			for range calls {
				require.NoError(t, <-done)
			}
		})
	}
}
