package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

// eager returns an EagerLease whose turn acks nothing: the write commits
// alone, and the instance it leased is the holder's (r.item), as a
// claim's would be.
func eager() (*store.EagerLease, *holder) {
	r := &holder{}
	return held(r), r
}

// requireLeasedAsAClaim checks that an item an eager start or completion
// leased is what a claim of its instance returns, field by field: it lets
// go of the eager lease, claims the instance, and compares. Only the
// token differs, and, for a turn that ran before its write (unread), the
// retention, which was not read (store.OrchestrationItem.RetentionUnread).
// It returns the claim's item.
func (h *harness) requireLeasedAsAClaim(tenant string, got *store.OrchestrationItem, unread bool) *store.OrchestrationItem {
	h.t.Helper()
	require.NotNil(h.t, got, "nothing was leased eagerly")
	require.Nil(h.t, h.fetch(tenant), "a claim took an instance leased eagerly")
	require.NoError(h.t, h.s.AbandonOrchestrationItem(h.ctx(), &store.AbandonOrchestrationItemParams{Lease: got.Lease}))
	want := h.mustFetch(tenant, got.Lease.InstanceID)
	require.NotEqual(h.t, want.Lease.Token, got.Lease.Token)
	require.Equal(h.t, want.Lease.TenantID, got.Lease.TenantID)
	require.Equal(h.t, want.Lease.InstanceID, got.Lease.InstanceID)
	require.Equal(h.t, want.Lease.ExpiresAt, got.Lease.ExpiresAt, "lease expiry")
	require.Equal(h.t, want.Instance, got.Instance, "instance")
	require.Equal(h.t, want.History, got.History, "history")
	require.Equal(h.t, want.Messages, got.Messages, "messages (ids included)")
	require.Equal(h.t, want.Claims, got.Claims, "claims")
	require.Equal(h.t, want.Strikes, got.Strikes, "strikes")
	cp := *got
	require.Equal(h.t, unread, got.RetentionUnread, "retention unread")
	if unread {
		require.Zero(h.t, got.Retention, "the retention of a turn that ran before its write")
		cp.Retention, cp.RetentionUnread = want.Retention, false
	}
	require.Equal(h.t, want.Retention, cp.Retention, "retention")
	// Nothing else: the whole item, but for the token.
	cp.Lease.Token = want.Lease.Token
	require.Equal(h.t, *want, cp)
	return want
}

// testEagerStart: a start that leases its instance gives the held turn
// what a claim would have; when the turn acks nothing, the start commits
// alone and holds the lease as a claim does, and lets it lapse into a
// claim's hands.
func testEagerStart(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	policy := store.RetentionPolicy{Default: store.Retention{Chain: store.ChainRetention{KeepLast: 3, AutoPrune: new(true)}}}
	_, err := h.s.UpdateTenant(h.ctx(), &store.UpdateTenantParams{TenantID: tenant, Retention: &policy})
	require.NoError(t, err)
	start := func(id string, e *store.EagerLease) (*store.StartOrchestrationResult, error) {
		return h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
			TenantID: tenant, InstanceID: id, Name: "order", Version: "1",
			Input: []byte(`{"n":1}`), Tags: map[string]string{"team": "a"}, TraceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			Retention: &store.Retention{Completed: new(time.Hour)},
			Start:     store.Message{Kind: kindStart, Payload: []byte(`{"input":{"n":1}}`)}, Eager: e,
		})
	}

	e, r := eager()
	_, err = start("order", e)
	require.NoError(t, err)
	require.NotNil(t, r.item)
	require.Equal(t, e.Token, r.item.Lease.Token)
	h.invariants()
	item := h.requireLeasedAsAClaim(tenant, r.item, true)
	h.ack(turn(item))

	// Its ack is the ack of a claim's item.
	e, r = eager()
	_, err = start("acked", e)
	require.NoError(t, err)
	h.ack(turn(r.item))
	require.Equal(t, int64(1), h.instance(tenant, "acked").EventCount)
	require.Nil(t, h.fetch(tenant), "an eager start's message came back after its ack")

	// A start refused leases nothing: its turn, which ran first, is void,
	// and wrote nothing.
	before, history := h.instance(tenant, "order"), h.history(tenant, "order", 1)
	e, r = eager()
	r.ackOf = turn
	_, err = start("order", e)
	require.ErrorIs(t, err, store.ErrAlreadyExists)
	require.Equal(t, 1, r.dones)
	require.False(t, r.acked)
	require.ErrorIs(t, r.result, store.ErrNotFound)
	require.False(t, e.Held)
	require.Equal(t, before, h.instance(tenant, "order"), "a void turn wrote to the instance whose id it took")
	require.Equal(t, history, h.history(tenant, "order", 1))
	// And one the tenant's cap refuses: its turn is void too, and no
	// instance of it is left.
	e, r = eager()
	r.ackOf = turn
	_, err = h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{TenantID: tenant, InstanceID: "capped",
		Name: "order", Version: "1", MaxRunning: new(int64(0)), Start: store.Message{Kind: kindStart}, Eager: e})
	require.ErrorIs(t, err, store.ErrTooManyRunning)
	require.Equal(t, 1, r.dones)
	require.ErrorIs(t, r.result, store.ErrNotFound)
	require.False(t, e.Held)
	_, err = h.s.GetInstance(h.ctx(), &store.GetInstanceParams{TenantID: tenant, InstanceID: "capped"})
	require.ErrorIs(t, err, store.ErrNotFound)
	h.invariants()

	// A lease that lapses (its loop is gone) is a claim's to take: the
	// second claim in a row, a suspect.
	e, r = eager()
	_, err = start("lapsed", e)
	require.NoError(t, err)
	require.Nil(t, h.fetch(tenant))
	h.clock.Advance(lease)
	taken := h.mustFetch(tenant, "lapsed")
	require.Equal(t, int64(2), taken.Claims)
	require.Equal(t, r.item.Messages, taken.Messages)
	h.ack(turn(taken))

	// Refused: a token that is no UUID, or no duration.
	_, err = start("bad", &store.EagerLease{Token: "x", Duration: lease, Hold: &holder{}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = start("bad", &store.EagerLease{Token: uuid.NewString(), Hold: &holder{}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = start("bad", &store.EagerLease{Token: uuid.NewString(), Duration: lease})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}

// testEagerCompletion: a task's completion that leases its free instance
// gives the held turn what a claim would have (here, a turn that acks
// nothing); an instance leased already is left to its lease, with the
// result queued for its next turn, and no turn runs.
func testEagerCompletion(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	complete := func(w *store.WorkItem, e *store.EagerLease) error {
		return h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Eager: e,
			Result: &store.Message{Kind: kindDone, Payload: []byte(`{"paid":true}`)}, TraceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	}

	h.scheduleActivities(tenant, "order", 2)
	first, second := h.fetchWork(tenant), h.fetchWork(tenant)
	e, r := eager()
	require.NoError(t, complete(first, e))
	require.NotNil(t, r.item)
	h.invariants()
	item := h.requireLeasedAsAClaim(tenant, r.item, false)
	require.Len(t, item.History, 3)

	// The instance is leased (by the claim above): the second completion
	// leases nothing, and its result waits for the turn after.
	e, r = eager()
	require.NoError(t, complete(second, e))
	require.Nil(t, r.item)
	h.ack(turn(item))
	next := h.mustFetch(tenant, "order")
	require.Len(t, next.Messages, 1)
	require.Equal(t, kindDone, next.Messages[0].Kind)
	h.ack(turn(next))

	// A completion whose task lease was lost leases nothing.
	h.scheduleActivities(tenant, "lost", 1)
	w := h.fetchWork(tenant)
	forged := *w
	forged.Lease.Token = uuid.NewString()
	e, r = eager()
	require.ErrorIs(t, complete(&forged, e), store.ErrLeaseLost)
	require.Nil(t, r.item)
	require.Nil(t, h.fetch(tenant))

	// A completion with no result for the instance leases nothing.
	e, r = eager()
	require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Eager: e}))
	require.Nil(t, r.item)
}

// testAheadCompletion: a completion whose turn runs before its write, on
// the instance as its last ack left it (EagerLease.Ahead), gives that turn
// the item a claim would return, with the completion's result, and commits
// the write and the turn's ack together. When the instance is not as the
// item has it (an ack or another message came since, it is leased, or the
// item is another instance's), the turn is void: the completion commits
// alone, and the instance is a claim's to take, counted as before.
func testAheadCompletion(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	complete := func(w *store.WorkItem, ahead *store.OrchestrationItem, r *holder) *store.EagerLease {
		t.Helper()
		e := held(r)
		e.Ahead = ahead
		require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Eager: e,
			Result:       &store.Message{Kind: kindDone, Payload: []byte(`{"paid":true}`)},
			TraceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}))
		return e
	}
	// requireVoid checks a void turn, and returns the claim of its
	// instance, which holds the completion's result.
	requireVoid := func(e *store.EagerLease, r *holder, id string) *store.OrchestrationItem {
		t.Helper()
		require.Equal(t, 1, r.turns, "turns run")
		require.Equal(t, 1, r.dones, "Done calls")
		require.False(t, r.acked)
		require.ErrorIs(t, r.result, store.ErrNotFound)
		require.False(t, e.Held)
		h.invariants()
		got := h.fetchInstance(tenant, id)
		require.Contains(t, got.Messages, r.item.Messages[0], "the completion's result")
		return got
	}

	// The turn's item is a claim's. It acks nothing here: the lease is the
	// holder's.
	ahead := h.scheduleActivities(tenant, "order", 2)
	first, second := h.fetchWork(tenant), h.fetchWork(tenant)
	r := &holder{}
	e := complete(first, ahead, r)
	require.True(t, e.Held)
	require.Equal(t, 1, r.turns)
	require.False(t, r.acked)
	require.NoError(t, r.result)
	item := h.requireLeasedAsAClaim(tenant, r.item, true)
	// Its ack commits with the write.
	p := turn(item)
	h.ack(p)
	ahead, ok := p.Next(item)
	require.True(t, ok)
	r = &holder{ackOf: turn}
	e = complete(second, ahead, r)
	requireAcked(t, e, r)
	require.Equal(t, int64(5), h.instance(tenant, "order").EventCount)
	require.Len(t, h.history(tenant, "order", 1), 5)
	require.Nil(t, h.fetch(tenant), "the result came back, or the lease was kept")
	h.invariants()

	// An ack came after the item: its events are not the turn's.
	ahead = h.scheduleActivities(tenant, "acked", 2)
	first, second = h.fetchWork(tenant), h.fetchWork(tenant)
	require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: first.Lease,
		Result: &store.Message{Kind: kindDone, Payload: []byte(`{}`)}}))
	h.ack(turn(h.mustFetch(tenant, "acked")))
	r = &holder{ackOf: turn}
	e = complete(second, ahead, r)
	got := requireVoid(e, r, "acked")
	require.Len(t, got.Messages, 1)
	require.Equal(t, int64(1), got.Claims, "a void turn's lease counted")
	h.ack(turn(got))

	// Another message came first.
	ahead = h.scheduleActivities(tenant, "evented", 1)
	w := h.fetchWork(tenant)
	h.enqueue(tenant, "evented", `{}`, 0)
	r = &holder{ackOf: turn}
	e = complete(w, ahead, r)
	got = requireVoid(e, r, "evented")
	require.Len(t, got.Messages, 2)
	require.Equal(t, int64(1), got.Claims)
	h.ack(turn(got))

	// The instance is leased: the write leases nothing, and the holder's
	// lease is untouched.
	ahead = h.scheduleActivities(tenant, "leased", 1)
	w = h.fetchWork(tenant)
	h.enqueue(tenant, "leased", `{}`, 0)
	other := h.mustFetch(tenant, "leased")
	r = &holder{ackOf: turn}
	e = complete(w, ahead, r)
	require.Equal(t, 1, r.turns)
	require.ErrorIs(t, r.result, store.ErrNotFound)
	require.False(t, e.Held)
	h.ack(turn(other))
	got = h.mustFetch(tenant, "leased")
	require.Equal(t, r.item.Messages, got.Messages)
	h.ack(turn(got))

	// Its lease lapsed: a suspect's, which the write's lease does not
	// fit; let go, the lapsed claim still counts.
	ahead = h.scheduleActivities(tenant, "lapsed", 1)
	w = h.fetchWork(tenant)
	h.enqueue(tenant, "lapsed", `{}`, 0)
	h.mustFetch(tenant, "lapsed")
	h.clock.Advance(lease)
	r = &holder{ackOf: turn}
	e = complete(w, ahead, r)
	got = requireVoid(e, r, "lapsed")
	require.Equal(t, int64(2), got.Claims)
	h.ack(turn(got))

	// The item is another instance's: the lease the write took on the
	// task's instance is let go.
	ahead = h.scheduleActivities(tenant, "mine", 1)
	h.scheduleActivities(tenant, "theirs", 1)
	w, o := h.fetchWork(tenant), h.fetchWork(tenant)
	if w.InstanceID != "theirs" {
		w, o = o, w
	}
	r = &holder{ackOf: turn}
	e = complete(w, ahead, r)
	require.Equal(t, 1, r.turns)
	require.ErrorIs(t, r.result, store.ErrNotFound)
	require.False(t, e.Held)
	h.invariants()
	got = h.mustFetch(tenant, "theirs")
	require.Len(t, got.Messages, 1)
	require.Equal(t, r.item.Messages[0].ID, got.Messages[0].ID)
	require.Equal(t, int64(1), got.Claims)
	h.ack(turn(got))
	require.Nil(t, h.fetch(tenant), "the item's own instance was made due")
	require.Equal(t, "mine", o.InstanceID)
}

// testNextTurn: a completion whose instance's next turn ran before it
// (AckWorkItemParams.Next) writes that turn in place of its result when
// the turn ends the instance, or only appends events, schedules tasks and
// sets timers, and the instance is still as the item has it: the rows are
// those of the same completion claimed and acked. Otherwise the turn is
// void and the result is enqueued, for a claim.
func testNextTurn(t *testing.T, h *harness) {
	claimed, folded := h.tenant("claimed"), h.tenant("folded")
	complete := func(tenant string, w *store.WorkItem, next *store.EagerLease) {
		t.Helper()
		require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Next: next,
			Result: &store.Message{Kind: kindDone, Payload: []byte(`{"paid":true}`)}}))
	}
	ends := func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
		p := turn(it)
		p.Status, p.Output = store.StatusCompleted, []byte(`"shipped"`)
		return p
	}
	goesOn := func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
		p := turn(it)
		id := int64(len(it.History)+len(p.History)) + 1
		p.History = append(p.History, store.HistoryEvent{EventID: id, Kind: "activity_scheduled"})
		p.Activities = []store.ActivityTask{{ActivityID: id, Name: "ship", TaskQueue: queue, Input: []byte(`{"to":"x"}`), Attempt: 1}}
		p.Messages = []store.OutgoingMessage{{InstanceID: it.Lease.InstanceID, ExecutionID: 1, Delay: time.Minute,
			Message: store.Message{Kind: "timer", Payload: []byte(`{}`)}}}
		return p
	}
	for _, c := range []struct {
		id     string
		ackOf  func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams
		counts map[store.Status]int64
	}{
		{"ends", ends, map[store.Status]int64{store.StatusCompleted: 1}},
		{"goes-on", goesOn, map[store.Status]int64{store.StatusCompleted: 1, store.StatusRunning: 1}},
	} {
		h.scheduleActivities(claimed, c.id, 1)
		complete(claimed, h.fetchWork(claimed), nil)
		want := c.ackOf(h.mustFetch(claimed, c.id))
		h.ack(want)

		ahead := h.scheduleActivities(folded, c.id, 1)
		var got *store.AckOrchestrationItemParams
		r := &holder{ackOf: func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
			got = c.ackOf(it)
			return got
		}}
		e := held(r)
		e.Ahead = ahead
		complete(folded, h.fetchWork(folded), e)
		requireAcked(t, e, r)
		in, wantIn := h.instance(folded, c.id), h.instance(claimed, c.id)
		wantIn.TenantID = folded
		require.Equal(t, wantIn, in, "%s: instance", c.id)
		require.Equal(t, *want.Acked, *got.Acked, "%s: what the ack wrote", c.id)
		require.Equal(t, h.history(claimed, c.id, 1), h.history(folded, c.id, 1), "%s: history", c.id)
		h.requireCounts(folded, c.counts)
		require.Nil(t, h.fetch(folded), "%s: the result is there, or the lease is held", c.id)
		require.Nil(t, h.fetch(claimed))
		h.invariants()
	}
	task, wantTask := h.fetchWorkBatch(folded, queue, 5), h.fetchWorkBatch(claimed, queue, 5)
	require.Len(t, task, 1)
	require.Len(t, wantTask, 1)
	a, b := *task[0], *wantTask[0]
	a.Lease, b.Lease = store.WorkLease{}, store.WorkLease{}
	require.Equal(t, b, a, "task")
	h.clock.Advance(time.Minute)
	timer, wantTimer := h.mustFetch(folded, "goes-on"), h.mustFetch(claimed, "goes-on")
	require.Len(t, timer.Messages, 1)
	m, wantM := timer.Messages[0], wantTimer.Messages[0]
	m.ID, wantM.ID = "", ""
	require.Equal(t, wantM, m, "timer")
	h.ack(turn(timer))
	h.ack(turn(wantTimer))
	complete(folded, task[0], nil)
	complete(claimed, wantTask[0], nil)
	h.ack(ends(h.mustFetch(folded, "goes-on")))
	h.ack(ends(h.mustFetch(claimed, "goes-on")))

	// An item of another instance than the task's.
	h.scheduleActivities(folded, "task", 1)
	other := h.scheduleActivities(folded, "other", 1)
	w := h.fetchWork(folded)
	require.Equal(t, "task", w.InstanceID)
	r := &holder{ackOf: ends}
	e := held(r)
	e.Ahead = other
	complete(folded, w, e)
	require.False(t, e.Held, "a turn written to another instance than its own")
	require.Equal(t, store.StatusRunning, h.instance(folded, "other").Status)
	h.ack(turn(h.mustFetch(folded, "task")))

	// void completes a task with a turn that must not be written: the
	// result is enqueued, and a claim gets it.
	void := func(w *store.WorkItem, ahead *store.OrchestrationItem, id string) *store.OrchestrationItem {
		t.Helper()
		r := &holder{ackOf: ends}
		e := held(r)
		e.Ahead = ahead
		complete(folded, w, e)
		require.Equal(t, 1, r.dones)
		require.False(t, r.acked)
		require.ErrorIs(t, r.result, store.ErrNotFound)
		require.False(t, e.Held)
		got := h.fetchInstance(folded, id)
		require.True(t, slices.ContainsFunc(got.Messages, func(m store.QueuedMessage) bool { return m.Kind == kindDone }), "the result")
		return got
	}
	// An event came first.
	// Each instance's tasks go to a queue of its name (taskOf).
	taskOf := func(id string) *store.WorkItem {
		t.Helper()
		return h.fetchWorkFrom(&store.FetchWorkItemsParams{TenantID: folded, TaskQueue: id, LeaseDuration: lease, Max: 1})
	}
	ahead := h.scheduleActivitiesOn(folded, "evented", "evented", 1)
	w = taskOf("evented")
	h.enqueue(folded, "evented", `{}`, 0)
	got := void(w, ahead, "evented")
	require.Len(t, got.Messages, 2)
	h.ack(turn(got))
	// Another turn ran since (the item is stale).
	ahead = h.scheduleActivitiesOn(folded, "stale", "stale", 2)
	first, second := taskOf("stale"), taskOf("stale")
	complete(folded, first, nil)
	h.ack(turn(h.mustFetch(folded, "stale")))
	h.ack(turn(void(second, ahead, "stale")))
	// The instance is leased (claimed after an event).
	ahead = h.scheduleActivitiesOn(folded, "leased", "leased", 1)
	w = taskOf("leased")
	h.enqueue(folded, "leased", `{}`, 0)
	claim := h.mustFetch(folded, "leased")
	r = &holder{ackOf: ends}
	e = held(r)
	e.Ahead = ahead
	complete(folded, w, e)
	require.False(t, e.Held, "a turn written under another's lease")
	h.ack(turn(claim))
	h.ack(turn(h.mustFetch(folded, "leased")))
	h.invariants()
}
