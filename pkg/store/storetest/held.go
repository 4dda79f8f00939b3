package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

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

// firstTurn is a first turn that a start can write with itself: it
// consumes the start message, appends two events, schedules a task and
// sets a timer on its own instance.
func firstTurn(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
	p := turn(it)
	p.History = append(p.History, store.HistoryEvent{EventID: int64(len(p.History)) + 1, Kind: "task_scheduled", Payload: []byte(`{"id":2}`)})
	p.Activities = []store.ActivityTask{{ActivityID: 2, Name: "charge", TaskQueue: queue, Input: []byte(`{"n":1}`), Attempt: 1}}
	p.Messages = []store.OutgoingMessage{{InstanceID: it.Lease.InstanceID, ExecutionID: 1, Delay: time.Minute,
		Message: store.Message{Kind: "timer", Payload: []byte(`{"at":60}`)}}}
	return p
}

// testFirstTurn: a start whose first turn ran before it (First) creates
// its instance as that turn's ack leaves it, when the turn only appends
// events, schedules tasks and sets timers on its instance: the instance,
// its history, counts, task and timer are those of the same start claimed
// and acked. Any other turn is void, and so is the turn of a start
// refused or whose rows fail: the start is then made as without First.
// An eager start writes such a turn so too.
func testFirstTurn(t *testing.T, h *harness) {
	start := func(tenant, id string, first, eager *store.EagerLease, maxRunning *int64) error {
		_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
			TenantID: tenant, InstanceID: id, Name: "order", Version: "1", Input: []byte(`{"n":1}`),
			Tags: map[string]string{"team": "a"}, Start: store.Message{Kind: kindStart, Payload: []byte(`{"input":{"n":1}}`)},
			First: first, Eager: eager, MaxRunning: maxRunning,
		})
		return err
	}
	claimed, folded := h.tenant("claimed"), h.tenant("folded")

	require.NoError(t, start(claimed, "order", nil, nil, nil))
	want := firstTurn(h.mustFetch(claimed, "order"))
	h.ack(want)
	var got *store.AckOrchestrationItemParams
	r := &holder{ackOf: func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
		got = firstTurn(it)
		return got
	}}
	e := held(r)
	require.NoError(t, start(folded, "order", e, nil, nil))
	requireAcked(t, e, r)
	require.Equal(t, e.Token, r.item.Lease.Token)
	require.Equal(t, int64(1), r.item.Claims)
	require.True(t, r.item.RetentionUnread)

	// The same rows, the tenant aside.
	in, wantIn := h.instance(folded, "order"), h.instance(claimed, "order")
	wantIn.TenantID = folded
	require.Equal(t, wantIn, in, "instance")
	require.Equal(t, int64(2), in.EventCount)
	require.Equal(t, *want.Acked, *got.Acked, "what the ack wrote")
	require.Equal(t, h.history(claimed, "order", 1), h.history(folded, "order", 1), "history")
	h.requireCounts(folded, map[store.Status]int64{store.StatusRunning: 1})
	require.Nil(t, h.fetch(folded), "the start message is there, or the lease is held")
	require.Nil(t, h.fetch(claimed))
	task, wantTask := h.fetchWorkBatch(folded, queue, 5), h.fetchWorkBatch(claimed, queue, 5)
	require.Len(t, task, 1)
	require.Len(t, wantTask, 1)
	task[0].Lease, wantTask[0].Lease = store.WorkLease{}, store.WorkLease{}
	require.Equal(t, *wantTask[0], *task[0], "task")
	h.clock.Advance(time.Minute)
	timer, wantTimer := h.mustFetch(folded, "order"), h.mustFetch(claimed, "order")
	require.Len(t, timer.Messages, 1)
	m, wantM := timer.Messages[0], wantTimer.Messages[0]
	m.ID, wantM.ID = "", ""
	require.Equal(t, wantM, m, "timer")
	require.Equal(t, wantTimer.Claims, timer.Claims)
	h.ack(turn(timer))
	h.ack(turn(wantTimer))
	h.invariants()

	// void runs a start whose first turn is void: the instance waits for a
	// claim with its start message, or the start is refused (err).
	void := func(id string, ackOf func(*store.OrchestrationItem) *store.AckOrchestrationItemParams, maxRunning *int64) error {
		t.Helper()
		r := &holder{ackOf: ackOf}
		e := held(r)
		err := start(folded, id, e, nil, maxRunning)
		require.Equal(t, 1, r.turns)
		require.Equal(t, 1, r.dones)
		require.False(t, r.acked)
		require.ErrorIs(t, r.result, store.ErrNotFound)
		require.False(t, e.Held)
		return err
	}
	// A turn that ends its instance.
	require.NoError(t, void("ends", func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
		p := turn(it)
		p.Status = store.StatusCompleted
		return p
	}, nil))
	item := h.mustFetch(folded, "ends")
	require.Len(t, item.Messages, 1)
	require.Equal(t, kindStart, item.Messages[0].Kind)
	h.ack(turn(item))
	// A turn whose rows fail (two events with one id): the start is made
	// again without it.
	require.NoError(t, void("failed", func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
		p := firstTurn(it)
		p.History = append(p.History, p.History[0])
		return p
	}, nil))
	item = h.mustFetch(folded, "failed")
	require.Equal(t, kindStart, item.Messages[0].Kind)
	require.Zero(t, h.instance(folded, "failed").EventCount)
	h.ack(turn(item))
	// Refused starts: the id is taken; the tenant runs its most.
	require.ErrorIs(t, void("order", firstTurn, nil), store.ErrAlreadyExists)
	require.Equal(t, int64(3), h.instance(folded, "order").EventCount, "the instance of the id taken")
	require.ErrorIs(t, void("over", firstTurn, new(int64(3))), store.ErrTooManyRunning)
	_, err := h.s.GetInstance(h.ctx(), &store.GetInstanceParams{TenantID: folded, InstanceID: "over"})
	require.ErrorIs(t, err, store.ErrNotFound)

	// An eager start writes such a turn with itself too.
	r = &holder{ackOf: firstTurn}
	e = held(r)
	require.NoError(t, start(folded, "eager", nil, e, nil))
	requireAcked(t, e, r)
	require.Equal(t, int64(2), h.instance(folded, "eager").EventCount)
	require.Nil(t, h.fetch(folded), "the eager start's instance is due")
	tasks := h.fetchWorkBatch(folded, queue, 5)
	require.True(t, slices.ContainsFunc(tasks, func(w *store.WorkItem) bool { return w.InstanceID == "eager" }), "the eager start's task")
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
