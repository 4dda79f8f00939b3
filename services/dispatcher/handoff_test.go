package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testwait"
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

// An idle loop offers its place; an empty delivery (a write that ran no
// turn in it) makes it fetch at once, and a place given back leaves it
// waiting (counted, not timed: the loop's poll interval is an hour).
func TestAnIdleLoopFetchesOnAnEmptyDelivery(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	handoff := notify.NewHandoff(0)
	d, err := dispatcher.New(dispatcher.Config{Store: s.store, Clock: s.clock, Logger: quiet(), Handoff: handoff, Hinted: true,
		Loops: 1, MinPoll: time.Hour, MaxPoll: time.Hour})
	require.NoError(t, err)
	s.startDispatcher(d)
	take := func() *notify.LoopPlace {
		t.Helper()
		testwait.Until(t, time.Minute, "the loop to offer its place", func() bool { return handoff.IdleLoops() == 1 && d.Stats().Running == 0 })
		place := handoff.TakeIdle(tenant)
		require.NotNil(t, place)
		require.NotNil(t, place.Hold(), "the loop's place offers no held turn")
		return place
	}

	place := take()
	before := d.Stats()
	place.Return()
	require.Same(t, place, handoff.TakeIdle(tenant), "a place given back was not offered again")
	require.Empty(t, place.Deliver(nil))
	testwait.Until(t, time.Minute, "the loop to fetch after an empty delivery", func() bool { return d.Stats().Fetches-before.Fetches == 1 })
}

// A started dispatcher with a Handoff runs the first turns of the starts
// that find no loop idle (Handoff.Holds), until it stops: such a start
// writes its turn's task with its instance, and no loop fetches it
// (counted, not timed: the loop polls once an hour).
func TestAStartsFirstTurnIsWrittenWithIt(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	handoff := notify.NewHandoff(0)
	d, err := dispatcher.New(dispatcher.Config{Store: s.store, Clock: s.clock, Logger: quiet(), Handoff: handoff, Hinted: true,
		Loops: 1, MinPoll: time.Hour, MaxPoll: time.Hour})
	require.NoError(t, err)
	hold, _, _ := handoff.Holder(tenant)
	require.Nil(t, hold, "a dispatcher not started holds first turns")
	s.startDispatcher(d)
	testwait.Until(t, time.Minute, "the loop to wait for work", func() bool { return handoff.IdleLoops() == 1 && d.Stats().Running == 0 })
	before := d.Stats()

	hold, lease, release := handoff.Holder(tenant)
	require.NotNil(t, hold)
	e := &store.EagerLease{Token: uuid.NewString(), Duration: lease, Hold: hold}
	s.startFirst("first", "one", 7, e)
	release()
	require.True(t, e.Held, "the first turn was not written with its start")
	w := s.task()
	require.Equal(t, "first", w.InstanceID)
	after := d.Stats()
	require.Equal(t, int64(1), after.Held-before.Held)
	require.Equal(t, int64(1), after.Turns-before.Turns)
	require.Zero(t, after.Fetches-before.Fetches, "a loop fetched the instance")

	s.stopDispatcher(d)
	hold, _, _ = handoff.Holder(tenant)
	require.Nil(t, hold, "a dispatcher stopped holds first turns")
}

// A turn held in a write runs in that write's transaction: a start's
// first turn schedules the activity with no fetch, and the completion's
// turn ends the instance. An instance whose lease lapsed before is a
// suspect even so: the completion commits alone, and its turn runs after,
// struck first, as a loop runs one (counted, not timed: the dispatcher
// runs no loop).
func TestATurnHeldInAWriteRunsThere(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	d := s.dispatcher(dispatcher.Config{})
	ctx := t.Context()
	held := func() *store.EagerLease {
		return &store.EagerLease{Token: uuid.NewString(), Duration: time.Minute, Hold: d.Hold()}
	}
	start := func(id string) {
		t.Helper()
		e := held()
		s.startEager(id, "one", 7, nil, e)
		require.True(t, e.Held, "the start's turn was not held")
	}
	complete := func(w *store.WorkItem) *store.EagerLease {
		t.Helper()
		e := held()
		s.complete(w, e)
		return e
	}

	start("plain")
	e := complete(s.task())
	require.True(t, e.Held, "the completion's turn was not held")
	require.Equal(t, store.StatusCompleted, s.instance("plain").Status)
	require.Equal(t, int64(2), d.Stats().Held)
	require.Zero(t, d.Stats().Fetches)

	// A suspect: an event made it due, a claim took it and lapsed.
	start("suspect")
	w := s.task()
	s.raise("suspect", "nudge", 1)
	claimed, err := s.store.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Equal(t, "suspect", claimed.Lease.InstanceID)
	s.clock.Advance(time.Minute)
	e = complete(w)
	require.True(t, e.Held)
	in := s.instance("suspect")
	require.Equal(t, store.StatusCompleted, in.Status, "the suspect's turn did not run after the commit")
	require.Equal(t, int64(3), d.Stats().Held, "a suspect's turn counted as held in the write")
	require.Equal(t, []string{"execution_started", "activity_scheduled", "event_received", "activity_completed", "execution_completed"}, s.history("suspect", 1))
}

// task leases the one task of queue q.
func (s *system) task() *store.WorkItem {
	s.t.Helper()
	items, err := s.store.FetchWorkItems(s.t.Context(), &store.FetchWorkItemsParams{TenantID: tenant, TaskQueue: "q",
		LeaseDuration: time.Minute, Max: 1})
	require.NoError(s.t, err)
	require.Len(s.t, items, 1, "no task was scheduled")
	return items[0]
}

// complete completes a task with its input as its result, under e.
func (s *system) complete(w *store.WorkItem, e *store.EagerLease) {
	s.t.Helper()
	kind, body, err := engine.EncodeMessage(engine.ActivityCompletedMessage{ExecutionID: w.ExecutionID, ActivityID: w.ActivityID,
		Attempt: w.Attempt, Result: w.Input})
	require.NoError(s.t, err)
	require.NoError(s.t, s.store.AckWorkItem(s.t.Context(), &store.AckWorkItemParams{Lease: w.Lease,
		Result: &store.Message{Kind: kind, Payload: body}, Eager: e}))
}

// A completion's turn runs before its write when the dispatcher has the
// instance as its last ack of it left it (store.EagerLease.Ahead): the
// write and the turn's ack commit together. An instance that changed
// since (an event came) leaves that turn void: the completion commits
// alone, and a loop's claim runs the turn on both messages.
func TestACompletionsTurnRunsAheadOfItsWrite(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	d := s.dispatcher(dispatcher.Config{Handoff: notify.NewHandoff(0)})
	eager := func(w *store.WorkItem) *store.EagerLease {
		t.Helper()
		hold := d.Hold()
		e := &store.EagerLease{Token: uuid.NewString(), Duration: time.Minute, Hold: hold}
		if w != nil {
			e.Ahead = hold.Ahead(tenant, w.InstanceID, w.ExecutionID)
			require.NotNil(t, e.Ahead, "the first turn's ack left no item ahead")
		}
		return e
	}

	s.startEager("ahead", "one", 7, nil, eager(nil))
	w := s.task()
	e := eager(w)
	s.complete(w, e)
	require.True(t, e.Held)
	require.Equal(t, store.StatusCompleted, s.instance("ahead").Status)
	require.Equal(t, []string{"execution_started", "activity_scheduled", "activity_completed", "execution_completed"}, s.history("ahead", 1))
	stats := d.Stats()
	require.Equal(t, int64(2), stats.Held)
	require.Equal(t, int64(1), stats.Ahead)
	require.Nil(t, d.Hold().Ahead(tenant, "ahead", 1), "an ended instance's item was kept")

	s.startEager("changed", "one", 7, nil, eager(nil))
	w = s.task()
	s.raise("changed", "nudge", 1)
	s.clock.Advance(time.Millisecond) // the event comes first in the turn
	e = eager(w)
	s.complete(w, e)
	require.False(t, e.Held, "a turn on an instance that changed held")
	require.Equal(t, store.StatusRunning, s.instance("changed").Status)
	require.Nil(t, d.Hold().Ahead(tenant, "changed", 1), "an item was given twice")
	stats = d.Stats()
	require.Equal(t, int64(3), stats.Held)
	require.Equal(t, int64(1), stats.Ahead)
	require.Zero(t, stats.LeaseLosses)
	s.startDispatcher(d)
	require.Equal(t, store.StatusCompleted, s.waitDone("changed").Status)
	require.Equal(t, []string{"execution_started", "activity_scheduled", "event_received", "activity_completed", "execution_completed"},
		s.history("changed", 1))
	require.Equal(t, int64(1), d.Stats().Ahead)
}

// A turn that runs before its write reads no retention; one that continues
// as new reads the tenant's policy then, and prunes as it says.
func TestAFirstTurnThatContinuesAsNewPrunesByThePolicy(t *testing.T) {
	t.Parallel()
	s := newSystem(t, counterDef)
	s.autoPruneKeeping(1)
	d := s.dispatcher(dispatcher.Config{})
	e := &store.EagerLease{Token: uuid.NewString(), Duration: time.Minute, Hold: d.Hold()}
	s.startEager("c", "counter", map[string]any{"n": 98}, nil, e)
	require.True(t, e.Held)
	executions, err := s.store.ListExecutions(t.Context(), &store.ListExecutionsParams{TenantID: tenant, InstanceID: "c"})
	require.NoError(t, err)
	require.Len(t, executions, 1, "the first execution was kept")
	require.Equal(t, int64(2), executions[0].ExecutionID)
}

// A start's first turn runs before its write (it needs nothing the write
// reads back). When the write finds the id taken, the turn is void: it
// wrote nothing, counts neither as held nor as a lease lost, and the
// place of the poll it took for its task gets an empty delivery, to look
// again.
func TestAFirstTurnWhoseStartCreatedNothingIsVoid(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	handoff := notify.NewHandoff(0)
	d := s.dispatcher(dispatcher.Config{Handoff: handoff})
	s.start("taken", "one", 7, nil)
	wait := handoff.Wait(tenant, "q", time.Minute, 1)
	wait.Offer()

	kind, payload, err := engine.EncodeMessage(engine.StartMessage{Input: []byte(`7`)})
	require.NoError(t, err)
	e := &store.EagerLease{Token: uuid.NewString(), Duration: time.Minute, Hold: d.Hold()}
	_, err = s.store.StartOrchestration(t.Context(), &store.StartOrchestrationParams{TenantID: tenant, InstanceID: "taken",
		Name: "one", Version: "1", Input: []byte(`7`), Start: store.Message{Kind: kind, Payload: payload}, Eager: e})
	require.ErrorIs(t, err, store.ErrAlreadyExists)
	require.False(t, e.Held)
	require.Empty(t, delivered(t, wait, "the place the void turn took got no word"))
	require.Zero(t, s.rows("worker_queue"), "a void turn scheduled its task")
	require.Empty(t, s.history("taken", 1), "a void turn wrote the history of the instance whose id it took")
	stats := d.Stats()
	require.Zero(t, stats.Held)
	require.Zero(t, stats.LeaseLosses)
	require.Zero(t, stats.Turns)
}

// An ack that ends its instance hands the instance to the waits for its
// end (notify.Handoff.AwaitEnd) before the end's hint, as a read right
// after returns it. An end whose chain the dispatcher prunes right after
// (which changes the instance's counters) is not handed over: its waits
// read.
func TestAnEndIsHandedToItsWaits(t *testing.T) {
	t.Parallel()
	s := newSystem(t, counterDef)
	s.autoPruneKeeping(1)
	handoff, hints := notify.NewHandoff(0), notify.NewLocal()
	waits, ends := map[string]*notify.EndWait{}, map[string]*notify.Subscription{}
	for _, id := range []string{"kept", "pruned"} {
		waits[id] = handoff.AwaitEnd(tenant, id)
		defer waits[id].Leave()
		ends[id] = hints.Subscribe(notify.Topic{Kind: notify.Ended, TenantID: tenant, Key: id})
		defer ends[id].Close()
	}
	s.handoffSystem(handoff, hints, nil)
	s.start("kept", "counter", map[string]any{"n": 98}, &store.Retention{Chain: store.ChainRetention{AutoPrune: new(false)}})
	s.start("pruned", "counter", map[string]any{"n": 98}, nil)
	for id, sub := range ends {
		select {
		case <-sub.C:
		case <-time.After(30 * time.Second):
			t.Fatalf("no hint of %s's end", id)
		}
	}

	got := waits["kept"].Instance()
	require.NotNil(t, got, "the end was not handed over")
	read := s.waitDone("kept")
	require.Equal(t, *read, *got)
	require.Equal(t, "100", string(got.Output))
	require.Equal(t, int64(3), got.ExecutionCount)
	require.Nil(t, waits["pruned"].Instance(), "an end pruned after its ack was handed over")
	require.Equal(t, int64(1), s.waitDone("pruned").ExecutionCount)
}
