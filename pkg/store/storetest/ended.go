package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

// queued is the tenant's count of queued messages (store.Usage).
func (h *harness) queued(tenant string) int64 {
	h.t.Helper()
	usage, ok := h.s.(store.Usage)
	require.True(h.t, ok, "the store does not implement store.Usage")
	u, err := usage.GetUsage(h.ctx(), &store.GetUsageParams{TenantID: tenant})
	require.NoError(h.t, err)
	return u.QueuedMessages
}

// An ended instance (Completed, Failed, Cancelled) never needs a turn
// again: the store keeps nothing for it to be claimed by (the store's
// invariants say what, checked right after each end), and a message that
// reaches it afterwards is consumed by a fetch that looks for it,
// without a turn, leaving the instance as it was. The messages: a child's
// result to a parent that ended first, an activity's result (with an
// eager lease asked for) after its instance ended, a message that came
// during the ending turn's lease and a timer the turn left.
func testLateMessagesToEndedInstance(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	for _, st := range []store.Status{store.StatusCompleted, store.StatusFailed, store.StatusCancelled} {
		// A parent that ends while its child runs, then hears from it.
		parent, child := "parent-"+string(st), "child-"+string(st)
		h.start(tenant, parent)
		h.startChildren(tenant, parent, child)
		h.finish(tenant, parent, st)
		h.invariants()
		ended := h.instance(tenant, parent)
		require.Equal(t, st, ended.Status)
		h.clock.Advance(time.Second)
		p := turn(h.fetchInstance(tenant, child))
		p.Status = store.StatusCompleted
		p.Messages = []store.OutgoingMessage{{InstanceID: parent, ExecutionID: 1, Message: store.Message{Kind: "child_completed"}}}
		h.ack(p)
		h.invariants()
		require.Equal(t, int64(1), h.queued(tenant))
		require.Nil(t, h.fetch(tenant), "a turn was handed out for an ended instance")
		require.Zero(t, h.queued(tenant), "the late result is still queued")
		require.Equal(t, ended, h.instance(tenant, parent))

		// An activity's result after its instance ended: no turn, eager
		// or fetched.
		worked := "worked-" + string(st)
		h.scheduleActivities(tenant, worked, 1)
		w := h.fetchWork(tenant)
		require.NotNil(t, w)
		h.finish(tenant, worked, st)
		h.invariants()
		ended = h.instance(tenant, worked)
		e, r := eager()
		require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Eager: e,
			Result: &store.Message{Kind: kindDone}}))
		require.Nil(t, r.item, "an ended instance was leased eagerly")
		require.Nil(t, h.fetch(tenant), "a turn was handed out for an ended instance")
		require.Zero(t, h.queued(tenant), "the late result is still queued")
		require.Equal(t, ended, h.instance(tenant, worked))

		// A turn that ends its instance with a message come during its
		// lease and a timer of its own still queued.
		left := "left-" + string(st)
		h.start(tenant, left)
		item := h.mustFetch(tenant, left)
		h.enqueue(tenant, left, `"meanwhile"`, 0)
		p = turn(item)
		p.Status = st
		p.Messages = []store.OutgoingMessage{{InstanceID: left, ExecutionID: 1, Message: store.Message{Kind: "timer"}, Delay: time.Minute}}
		h.ack(p)
		h.invariants()
		ended = h.instance(tenant, left)
		require.Equal(t, st, ended.Status)
		require.Equal(t, int64(2), h.queued(tenant))
		require.Nil(t, h.fetch(tenant), "a turn was handed out for an ended instance")
		require.Equal(t, int64(1), h.queued(tenant), "the message come during the lease is still queued, or the timer is gone early")
		h.clock.Advance(time.Minute)
		require.Nil(t, h.fetch(tenant), "a turn was handed out for an ended instance")
		require.Zero(t, h.queued(tenant), "the timer is still queued")
		require.Equal(t, ended, h.instance(tenant, left))
	}
}

// One ack commits turns that end their instances beside turns whose
// instances go on, one of which messages an instance ending in the same
// ack: every turn holds, the instances that go on are claimed again for
// their next messages, and the ended ones never are.
func testAckEndsAndContinuesTogether(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	ids := []string{"a-ends", "b-goes-on", "c-ends", "d-continues-as-new"}
	for _, id := range ids {
		h.start(tenant, id)
	}
	items, err := h.s.FetchOrchestrationItems(h.ctx(), &store.FetchOrchestrationItemsParams{
		FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: lease}, Max: len(ids)})
	require.NoError(t, err)
	require.Len(t, items, len(ids))
	var turns []*store.AckOrchestrationItemParams
	for _, it := range items {
		p := turn(it)
		switch it.Lease.InstanceID {
		case "a-ends":
			p.Status, p.Output = store.StatusCompleted, []byte(`1`)
		case "b-goes-on":
			p.Messages = []store.OutgoingMessage{
				{InstanceID: "c-ends", ExecutionID: 1, Message: store.Message{Kind: kindEvent}},
				{InstanceID: "b-goes-on", ExecutionID: 1, Message: store.Message{Kind: kindEvent}}}
		case "c-ends":
			p.Status, p.Error = store.StatusFailed, "boom"
		case "d-continues-as-new":
			p.Status = store.StatusContinuedAsNew
			p.ContinueAsNew = &store.ContinueAsNew{Start: store.Message{Kind: kindStart}}
		}
		turns = append(turns, p)
	}
	errs, err := h.s.AckOrchestrationItems(h.ctx(), &store.AckOrchestrationItemsParams{Turns: turns})
	require.NoError(t, err)
	for i, e := range errs {
		require.NoError(t, e, turns[i].Lease.InstanceID)
	}
	h.invariants()
	require.Equal(t, store.StatusCompleted, h.instance(tenant, "a-ends").Status)
	require.Equal(t, store.StatusFailed, h.instance(tenant, "c-ends").Status)
	require.Equal(t, int64(2), h.instance(tenant, "d-continues-as-new").CurrentExecutionID)

	// The instances that go on are claimed for their messages; the message
	// to c-ends, sent as it ended, is consumed without a turn.
	var got []string
	for item := h.fetch(tenant); item != nil; item = h.fetch(tenant) {
		got = append(got, item.Lease.InstanceID)
		h.ack(turn(item))
	}
	require.ElementsMatch(t, []string{"b-goes-on", "d-continues-as-new"}, got)
	require.Zero(t, h.queued(tenant))
}
