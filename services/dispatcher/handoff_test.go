package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// handoffSystem starts a dispatcher that hands tasks over (and sends hints
// to hints); beforeAck, when set, runs between its turns and its ack.
func (s *system) handoffSystem(handoff *notify.Handoff, hints notify.Notifier, beforeAck func()) *dispatcher.Dispatcher {
	s.t.Helper()
	d := s.dispatcher(dispatcher.Config{Handoff: handoff, Notifier: hints, Loops: 1})
	if beforeAck != nil {
		var once sync.Once
		d.SetBeforeAck(func(context.Context, []*store.OrchestrationItem) { once.Do(beforeAck) })
	}
	s.startDispatcher(d)
	return d
}

// noHint says that no hint of t came (a hint held by a subscription).
func noHint(t *testing.T, sub *notify.Subscription, why string) {
	t.Helper()
	select {
	case <-sub.C:
		t.Fatal(why)
	default:
	}
}

// An ack that schedules a task while a poll's place waits for its task
// queue inserts the task leased to that place and hands it over after the
// commit: no claim finds it, no hint is sent for it, and its lease
// completes it.
func TestAnAckHandsItsTaskToAWaitingPoll(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	handoff, hints := notify.NewHandoff(0), notify.NewLocal()
	tasks := hints.Subscribe(notify.Topic{Kind: notify.Tasks, TenantID: tenant, Key: "q"})
	defer tasks.Close()
	wait := handoff.Wait(tenant, "q", time.Minute, 1)
	wait.Offer()
	s.handoffSystem(handoff, hints, nil)
	s.start("one", "one", 7, nil)

	items := delivered(t, wait, "the scheduled task was not handed to the waiting place")
	require.Len(t, items, 1)
	it := items[0]
	require.Equal(t, "one", it.InstanceID)
	require.Equal(t, "echo", it.Name)
	require.Equal(t, wait.Token(), it.Lease.Token)
	require.Equal(t, tenant, it.Lease.TenantID)
	require.Equal(t, s.clock.Now().Add(time.Minute).UnixMilli(), it.Lease.ExpiresAt.UnixMilli())
	require.JSONEq(t, `7`, string(it.Input))
	require.Empty(t, wait.Leave())
	require.Zero(t, handoff.Waiting())
	noHint(t, tasks, "a task handed over was hinted too")

	left, err := s.store.FetchWorkItems(t.Context(), &store.FetchWorkItemsParams{TenantID: tenant, TaskQueue: "q", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Empty(t, left, "a claim took the task handed over")
	kind, body, err := engine.EncodeMessage(engine.ActivityCompletedMessage{ExecutionID: it.ExecutionID, ActivityID: it.ActivityID,
		Attempt: it.Attempt, Result: []byte(`8`)})
	require.NoError(t, err)
	require.NoError(t, s.store.AckWorkItem(t.Context(), &store.AckWorkItemParams{Lease: it.Lease, Result: &store.Message{Kind: kind, Payload: body}}))
	hints.Notify(t.Context(), notify.Topic{Kind: notify.Orchestrations, TenantID: tenant})
	require.Equal(t, store.StatusCompleted, s.waitDone("one").Status)
	require.Equal(t, oneActivityHistory, s.history("one", 1))
}

// A poll that leaves while an ack holds its place (taken, not yet
// delivered) leaves the task to the delivery, which hands it back at once
// with a hint: a claim then takes it, well before its lease would lapse.
func TestATaskHandedToAPollThatLeftIsHandedBack(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	handoff, hints := notify.NewHandoff(0), notify.NewLocal()
	tasks := hints.Subscribe(notify.Topic{Kind: notify.Tasks, TenantID: tenant, Key: "q"})
	defer tasks.Close()
	wait := handoff.Wait(tenant, "q", time.Hour, 1)
	wait.Offer()
	s.handoffSystem(handoff, hints, func() {
		require.Zero(t, handoff.Waiting(), "the ack did not take the place")
		require.Empty(t, wait.Leave(), "a place taken had tasks before its ack")
	})
	s.start("one", "one", 7, nil)

	select {
	case <-tasks.C:
	case <-time.After(time.Minute):
		t.Fatal("no hint of the task handed back")
	}
	items, err := s.store.FetchWorkItems(t.Context(), &store.FetchWorkItemsParams{TenantID: tenant, TaskQueue: "q", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, items, 1, "the task of a poll that left was not handed back")
	require.NotEqual(t, wait.Token(), items[0].Lease.Token)
	select {
	case <-wait.Done():
		t.Fatal("a poll that left was delivered to")
	default:
	}
}

// An ack whose turn does not hold (its instance was deleted under it)
// inserts nothing, and delivers nothing: the place's poll looks again.
func TestAnAckThatDidNotHoldDeliversNothing(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	handoff := notify.NewHandoff(0)
	wait := handoff.Wait(tenant, "q", time.Minute, 1)
	wait.Offer()
	s.handoffSystem(handoff, nil, func() {
		_, err := s.store.DeleteInstance(context.WithoutCancel(s.t.Context()), &store.DeleteInstanceParams{TenantID: tenant, InstanceID: "one", Force: true})
		require.NoError(t, err)
	})
	s.start("one", "one", 7, nil)
	items := delivered(t, wait, "the taken place got no word of its ack")
	require.Empty(t, items, "a task of a turn that did not hold was handed over")
	require.Zero(t, s.rows("worker_queue"))
}

// delivered waits for a delivery to the place (failing with why after a
// minute) and returns what it holds.
func delivered(t *testing.T, wait *notify.TaskWait, why string) []*store.WorkItem {
	t.Helper()
	select {
	case <-wait.Done():
	case <-time.After(time.Minute):
		t.Fatal(why)
	}
	items, pending := wait.Withdraw()
	require.False(t, pending, "a delivered place is not pending")
	return items
}
