package storetest

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

// holder is a store.HeldTurn that acks the item it gets with what ackOf
// returns (no ackOf: no ack), and records what it was told.
type holder struct {
	ackOf func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams
	item  *store.OrchestrationItem
	turns int
	dones int
	acked bool
	// result is Done's.
	result error
}

// Ahead is not the store's to call (EagerLease.Ahead is the caller's).
func (r *holder) Ahead(string, string, int64) *store.OrchestrationItem { return nil }

func (r *holder) Turn(_ context.Context, it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
	r.item = it
	r.turns++
	if r.ackOf == nil {
		return nil
	}
	return r.ackOf(it)
}

func (r *holder) Done(_ context.Context, acked bool, result error) {
	r.dones++
	r.acked, r.result = acked, result
}

// held returns an EagerLease whose turn r holds.
func held(r *holder) *store.EagerLease {
	return &store.EagerLease{Token: uuid.NewString(), Duration: lease, Hold: r}
}

// requireAcked checks that a held turn ran once and its ack committed
// with the write.
func requireAcked(t *testing.T, e *store.EagerLease, r *holder) {
	t.Helper()
	require.Equal(t, 1, r.turns, "turns run")
	require.Equal(t, 1, r.dones, "Done calls")
	require.True(t, r.acked, "the ack did not commit with the write")
	require.NoError(t, r.result)
	require.True(t, e.Held)
}

// testHeldStart: a start gives its turn the new instance, and commits the
// turn's ack with the instance. An ack the store refuses leaves the
// instance leased to its holder, who acks on its own; an ack that fails in
// the database takes nothing of the start with it: the start is made again,
// free for a claim, and the holder's lease is lost. (A refused start's
// turn is void: EagerStart.)
func testHeldStart(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	start := func(id string, e *store.EagerLease) error {
		_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
			TenantID: tenant, InstanceID: id, Name: "order", Version: "1", Input: []byte(`{"n":1}`),
			Start: store.Message{Kind: kindStart, Payload: []byte(`{"input":{"n":1}}`)}, Eager: e,
		})
		return err
	}

	r := &holder{ackOf: turn}
	e := held(r)
	require.NoError(t, start("order", e))
	requireAcked(t, e, r)
	require.Equal(t, e.Token, r.item.Lease.Token)
	require.Equal(t, "order", r.item.Lease.InstanceID)
	require.Equal(t, int64(1), r.item.Claims)
	require.Len(t, r.item.Messages, 1)
	require.Equal(t, kindStart, r.item.Messages[0].Kind)
	require.Equal(t, "order", r.item.Instance.Name)
	require.Equal(t, int64(1), h.instance(tenant, "order").EventCount, "the turn's history")
	require.Nil(t, h.fetch(tenant), "the start message came back, or the lease was kept")
	h.invariants()

	// An ack the store refuses: the start commits alone, leased to the
	// holder, who acks on its own (as after a turn with no ack: EagerStart).
	r = &holder{ackOf: func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
		return &store.AckOrchestrationItemParams{Lease: it.Lease}
	}}
	e = held(r)
	require.NoError(t, start("refused", e))
	require.Equal(t, 1, r.dones)
	require.False(t, r.acked)
	h.ack(turn(r.item))
	h.invariants()

	// An ack that fails in the database (two events with one id).
	r = &holder{ackOf: func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
		p := turn(it)
		p.History = append(p.History, p.History[0])
		return p
	}}
	e = held(r)
	require.NoError(t, start("failed", e))
	require.Equal(t, 1, r.dones)
	require.False(t, r.acked)
	require.False(t, e.Held)
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), turn(r.item)), store.ErrLeaseLost)
	again := h.mustFetch(tenant, "failed")
	require.Len(t, again.Messages, 1)
	require.NotEqual(t, r.item.Messages[0].ID, again.Messages[0].ID, "the start made again is a new message")
	h.ack(turn(again))
	require.Equal(t, int64(1), h.instance(tenant, "failed").EventCount)
	h.invariants()

}

// testHeldCompletion: a task's completion commits its result and the turn
// that consumes it together. (A completion that leases nothing runs no
// turn: EagerCompletion.)
func testHeldCompletion(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	complete := func(w *store.WorkItem, e *store.EagerLease) error {
		return h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Eager: e,
			Result: &store.Message{Kind: kindDone, Payload: []byte(`{"paid":true}`)}})
	}

	h.scheduleActivities(tenant, "order", 2)
	first := h.fetchWork(tenant)
	r := &holder{ackOf: turn}
	e := held(r)
	require.NoError(t, complete(first, e))
	requireAcked(t, e, r)
	require.Len(t, r.item.History, 3)
	require.Len(t, r.item.Messages, 1)
	require.Equal(t, kindDone, r.item.Messages[0].Kind)
	require.Equal(t, int64(4), h.instance(tenant, "order").EventCount)
	require.Nil(t, h.fetch(tenant), "the result came back, or the lease was kept")
	h.invariants()
}
