package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

func testStartAndFetch(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "order-1")

	in := h.instance(tenant, "order-1")
	require.Equal(t, store.StatusRunning, in.Status)
	require.Equal(t, int64(1), in.CurrentExecutionID)
	require.Equal(t, "order", in.Name)
	require.Equal(t, "1", in.Version)
	require.Equal(t, "order-1", in.RootInstanceID)
	require.Empty(t, in.ParentInstanceID)
	require.JSONEq(t, `{"n":1}`, string(in.Input))
	require.Equal(t, map[string]string{"team": "a"}, in.Tags)
	require.Equal(t, h.clock.Now(), in.CreatedAt)
	require.True(t, in.CompletedAt.IsZero())
	require.Equal(t, int64(1), in.ExecutionCount)

	item := h.mustFetch(tenant, "order-1")
	h.invariants() // with the lease held
	require.Equal(t, tenant, item.Lease.TenantID)
	require.NotEmpty(t, item.Lease.Token)
	require.Equal(t, h.clock.Now().Add(lease), item.Lease.ExpiresAt)
	require.Empty(t, item.History)
	require.Len(t, item.Messages, 1)
	require.Equal(t, kindStart, item.Messages[0].Kind)
	require.Equal(t, int64(1), item.Messages[0].ExecutionID)

	// Leased: nobody else gets it, even with a message waiting.
	h.enqueue(tenant, "order-1", `"approve"`, 0)
	require.Nil(t, h.fetch(tenant))

	h.clock.Advance(time.Second)
	h.ack(turn(item))
	// The event that arrived during the turn was not consumed by it.
	item = h.mustFetch(tenant, "order-1")
	require.Len(t, item.History, 1)
	require.Equal(t, "received_start", item.History[0].Kind)
	require.Equal(t, int64(1), item.History[0].EventID)
	require.Len(t, item.Messages, 1)
	require.Equal(t, `"approve"`, string(item.Messages[0].Payload))
	h.ack(turn(item))

	in = h.instance(tenant, "order-1")
	require.Equal(t, int64(2), in.EventCount)
	require.Equal(t, h.clock.Now(), in.UpdatedAt)
	require.Nil(t, h.fetch(tenant))
}

func testStartTakenID(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "dup")
	_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
		TenantID: tenant, InstanceID: "dup", Name: "other", Start: store.Message{Kind: kindStart},
	})
	require.ErrorIs(t, err, store.ErrAlreadyExists)
	require.Equal(t, "order", h.instance(tenant, "dup").Name)
	// Only the first start message exists.
	item := h.mustFetch(tenant, "dup")
	require.Len(t, item.Messages, 1)
}

func testEnqueueMissingInstance(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	_, err := h.s.Enqueue(h.ctx(), &store.EnqueueParams{TenantID: tenant, InstanceID: "nope", Message: store.Message{Kind: kindEvent}})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = h.s.GetInstance(h.ctx(), &store.GetInstanceParams{TenantID: tenant, InstanceID: "nope"})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = h.s.GetHistory(h.ctx(), &store.GetHistoryParams{TenantID: tenant, InstanceID: "nope"})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Nil(t, h.fetch(tenant))
}

// An ended instance takes no message (nothing would ever consume it); a
// deleted one is not found.
func testEnqueueTerminalInstance(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	for _, status := range []store.Status{store.StatusCompleted, store.StatusFailed, store.StatusCancelled} {
		id := "ended-" + string(status)
		h.start(tenant, id)
		h.finish(tenant, id, status)
		_, err := h.s.Enqueue(h.ctx(), &store.EnqueueParams{TenantID: tenant, InstanceID: id, Message: store.Message{Kind: kindEvent}})
		require.ErrorIs(t, err, store.ErrInstanceTerminal, status)
		require.Nil(t, h.fetch(tenant), "a message was queued for an ended instance")
		_, err = h.deleteInstance(tenant, id, false)
		require.NoError(t, err)
		_, err = h.s.Enqueue(h.ctx(), &store.EnqueueParams{TenantID: tenant, InstanceID: id, Message: store.Message{Kind: kindEvent}})
		require.ErrorIs(t, err, store.ErrNotFound, status)
	}
}

// A turn withdraws messages an earlier turn queued for its instance (a
// timer that will never matter): the matching messages of that instance
// go, those of other instances and other payloads stay, and the instance is
// no longer due at the withdrawn one's time.
func testWithdrawMessages(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	timer := func(id, payload string, delay time.Duration) store.OutgoingMessage {
		return store.OutgoingMessage{InstanceID: id, Message: store.Message{Kind: "timer", Payload: []byte(payload)}, Delay: delay}
	}
	for _, id := range []string{"a", "b"} {
		h.start(tenant, id)
		p := turn(h.fetchInstance(tenant, id))
		p.Messages = []store.OutgoingMessage{timer(id, `{"t":1}`, time.Hour), timer(id, `{"t":2}`, 48*time.Hour)}
		h.ack(p)
	}
	h.enqueue(tenant, "a", `"won"`, 0)
	p := turn(h.fetchInstance(tenant, "a"))
	p.WithdrawMessages = []store.Message{{Kind: "timer", Payload: []byte(`{"t":1}`)}}
	h.ack(p)

	h.clock.Advance(2 * time.Hour)
	item := h.fetch(tenant)
	require.NotNil(t, item)
	require.Equal(t, "b", item.Lease.InstanceID, "a is not due: its 1 h timer was withdrawn")
	require.Len(t, item.Messages, 1)
	require.JSONEq(t, `{"t":1}`, string(item.Messages[0].Payload))
	h.ack(turn(item))
	require.Nil(t, h.fetch(tenant))
	h.clock.Advance(48 * time.Hour)
	item = h.fetchInstance(tenant, "a")
	require.Len(t, item.Messages, 1)
	require.JSONEq(t, `{"t":2}`, string(item.Messages[0].Payload))
}

// 16 fetchers race over 1,000 messages across 50 instances: each message is
// consumed exactly once and no instance is ever leased by two at a time.
func testExactlyOnceDelivery(t *testing.T, h *harness) {
	const instances, perInstance, fetchers = 50, 20, 16
	tenant := h.tenant("acme")
	for i := range instances {
		id := fmt.Sprintf("i-%02d", i)
		h.start(tenant, id)
		for j := 1; j < perInstance; j++ {
			h.enqueue(tenant, id, fmt.Sprintf(`"%s/%d"`, id, j), 0)
		}
	}

	var (
		mu       sync.Mutex
		leased   = map[string]bool{}
		seen     = map[string]int{}
		consumed atomic.Int64
		failed   atomic.Bool
		errs     = make(chan error, fetchers)
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(2 * time.Minute)
	for range fetchers {
		wg.Go(func() {
			fail := func(err error) {
				failed.Store(true)
				errs <- err
			}
			for consumed.Load() < instances*perInstance && !failed.Load() && time.Now().Before(deadline) {
				item, err := h.s.FetchOrchestrationItem(h.ctx(), &store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: time.Hour})
				if err != nil {
					fail(err)
					return
				}
				if item == nil {
					continue
				}
				id := item.Lease.InstanceID
				mu.Lock()
				if leased[id] {
					mu.Unlock()
					fail(fmt.Errorf("instance %s leased twice at the same time", id))
					return
				}
				leased[id] = true
				for _, m := range item.Messages {
					seen[m.ID]++
				}
				mu.Unlock()

				p := turn(item)
				// Still leased until the ack commits: forget it first, so
				// that a fetch right after the commit is no false alarm.
				mu.Lock()
				delete(leased, id)
				mu.Unlock()
				if err := h.s.AckOrchestrationItem(h.ctx(), p); err != nil {
					fail(fmt.Errorf("ack %s: %w", id, err))
					return
				}
				consumed.Add(int64(len(item.Messages)))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(instances*perInstance), consumed.Load())
	require.Len(t, seen, instances*perInstance)
	for id, n := range seen {
		require.Equal(t, 1, n, "message %s delivered %d times", id, n)
	}
	for i := range instances {
		id := fmt.Sprintf("i-%02d", i)
		events := h.history(tenant, id, 0)
		require.Len(t, events, perInstance, id)
		payloads := map[string]bool{}
		for k, ev := range events {
			require.Equal(t, int64(k+1), ev.EventID)
			payloads[string(ev.Payload)] = true
		}
		require.Len(t, payloads, perInstance, "a message of %s was duplicated or lost", id)
		require.Equal(t, int64(perInstance), h.instance(tenant, id).EventCount)
	}
	require.Nil(t, h.fetch(tenant))
}

func testInvisibleUntilVisibleAt(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "timer")
	h.ack(turn(h.mustFetch(tenant, "timer")))

	h.enqueue(tenant, "timer", `"fired"`, 10*time.Second)
	require.Nil(t, h.fetch(tenant))
	h.clock.Advance(9999 * time.Millisecond)
	require.Nil(t, h.fetch(tenant))
	h.clock.Advance(time.Millisecond)
	item := h.mustFetch(tenant, "timer")
	require.Len(t, item.Messages, 1)
	require.Equal(t, `"fired"`, string(item.Messages[0].Payload))
	require.Equal(t, h.clock.Now(), item.Messages[0].VisibleAt)
}

func testNothingToFetch(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	item, err := h.s.FetchOrchestrationItem(h.ctx(), &store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: lease})
	require.NoError(t, err)
	require.Nil(t, item)
	item, err = h.s.FetchOrchestrationItem(h.ctx(), &store.FetchOrchestrationItemParams{LeaseDuration: lease})
	require.NoError(t, err)
	require.Nil(t, item)
	for _, tenant := range []string{tenant, ""} {
		w, err := h.s.FetchWorkItems(h.ctx(), &store.FetchWorkItemsParams{TenantID: tenant, TaskQueue: queue, LeaseDuration: lease, Max: 10})
		require.NoError(t, err)
		require.Empty(t, w)
	}
}

func testExpiredLeaseTakenOver(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "slow")
	first := h.mustFetch(tenant, "slow")

	h.clock.Advance(lease - time.Millisecond)
	require.Nil(t, h.fetch(tenant), "a live lease was taken over")
	h.clock.Advance(time.Millisecond)
	second := h.mustFetch(tenant, "slow")
	require.NotEqual(t, first.Lease.Token, second.Lease.Token)
	require.Equal(t, first.Messages[0].ID, second.Messages[0].ID)

	_, err := h.s.RenewOrchestrationLease(h.ctx(), &store.RenewOrchestrationLeaseParams{Lease: first.Lease, Duration: lease})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	p := turn(first)
	p.Activities = []store.ActivityTask{{ActivityID: 2, Name: "zombie", TaskQueue: queue}}
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), p), store.ErrLeaseLost)
	require.ErrorIs(t, h.s.AbandonOrchestrationItem(h.ctx(), &store.AbandonOrchestrationItemParams{Lease: first.Lease}), store.ErrLeaseLost)

	// The old token changed nothing.
	require.Empty(t, h.history(tenant, "slow", 0))
	require.Nil(t, h.fetchWork(tenant))
	_, err = h.s.RenewOrchestrationLease(h.ctx(), &store.RenewOrchestrationLeaseParams{Lease: second.Lease, Duration: lease})
	require.NoError(t, err)
	h.ack(turn(second))
	require.Len(t, h.history(tenant, "slow", 0), 1)

	// An expired lease that nobody took over cannot ack either.
	h.enqueue(tenant, "slow", `"again"`, 0)
	third := h.mustFetch(tenant, "slow")
	h.clock.Advance(lease)
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), turn(third)), store.ErrLeaseLost)
	require.Len(t, h.history(tenant, "slow", 0), 1)
}

func testRenewKeepsLease(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "long")
	item := h.mustFetch(tenant, "long")
	for range 3 {
		h.clock.Advance(lease - time.Second)
		until, err := h.s.RenewOrchestrationLease(h.ctx(), &store.RenewOrchestrationLeaseParams{Lease: item.Lease, Duration: lease})
		require.NoError(t, err)
		require.Equal(t, h.clock.Now().Add(lease), until)
		require.Nil(t, h.fetch(tenant))
		h.invariants()
	}
	h.ack(turn(item))
}

func testAbandonWithDelay(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "flaky")
	item := h.mustFetch(tenant, "flaky")
	require.NoError(t, h.s.AbandonOrchestrationItem(h.ctx(), &store.AbandonOrchestrationItemParams{Lease: item.Lease, Delay: 5 * time.Second}))
	h.invariants()
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), turn(item)), store.ErrLeaseLost)
	require.Nil(t, h.fetch(tenant))
	h.clock.Advance(5 * time.Second)
	again := h.mustFetch(tenant, "flaky")
	require.Len(t, again.Messages, 1, "abandon consumed a message")

	require.NoError(t, h.s.AbandonOrchestrationItem(h.ctx(), &store.AbandonOrchestrationItemParams{Lease: again.Lease}))
	h.ack(turn(h.mustFetch(tenant, "flaky")))
}

// The messages a lease holds come back when it is given up without
// consuming them, at once and in the order they became visible: after an
// abandon, after an ack that consumes some of them, and after the lease
// expires; and not before, while renewals keep it.
func testLeasedMessagesComeBack(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "m")
	h.ack(turn(h.mustFetch(tenant, "m")))
	h.enqueue(tenant, "m", `"timer"`, 10*time.Second) // visible at t+10s, sent first
	h.clock.Advance(5 * time.Second)
	h.enqueue(tenant, "m", `"early"`, 0) // visible at t+5s
	h.clock.Advance(6 * time.Second)
	h.enqueue(tenant, "m", `"late"`, 0) // visible at t+11s
	payloads := func(item *store.OrchestrationItem) []string {
		var out []string
		for _, m := range item.Messages {
			out = append(out, string(m.Payload))
		}
		return out
	}
	want := []string{`"early"`, `"timer"`, `"late"`}

	item := h.mustFetch(tenant, "m")
	require.Equal(t, want, payloads(item))
	require.NoError(t, h.s.AbandonOrchestrationItem(h.ctx(), &store.AbandonOrchestrationItemParams{Lease: item.Lease}))
	item = h.mustFetch(tenant, "m")
	require.Equal(t, want, payloads(item), "after an abandon")

	// Renewed past the first expiry: still held, nothing to fetch.
	h.clock.Advance(lease - time.Second)
	_, err := h.s.RenewOrchestrationLease(h.ctx(), &store.RenewOrchestrationLeaseParams{Lease: item.Lease, Duration: lease})
	require.NoError(t, err)
	h.clock.Advance(2 * time.Second)
	require.Nil(t, h.fetch(tenant), "a renewed lease let its messages go")
	h.clock.Advance(lease)
	item = h.mustFetch(tenant, "m")
	require.Equal(t, want, payloads(item), "after the lease expired")

	// The turn consumes the first message only; the others are there at once.
	p := turn(item)
	p.MessageIDs, p.History = p.MessageIDs[:1], p.History[:1]
	h.ack(p)
	item = h.mustFetch(tenant, "m")
	require.Equal(t, want[1:], payloads(item), "after an ack that left some")
	h.ack(turn(item))
	require.Nil(t, h.fetch(tenant))
}

// An ack that fails part-way (here: a history event id that already exists,
// after the lease release and message deletes were sent) leaves nothing of
// itself behind: the lease is still held, the messages are still there, and
// no task or message it carried was enqueued.
func testAckFailurePartWay(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "a")
	h.ack(turn(h.mustFetch(tenant, "a")))
	h.enqueue(tenant, "a", `"go"`, 0)
	item := h.mustFetch(tenant, "a")

	bad := turn(item)
	bad.History = append(bad.History, store.HistoryEvent{EventID: 1, Kind: "duplicate"})
	bad.Activities = []store.ActivityTask{{ActivityID: 3, Name: "charge", TaskQueue: queue}}
	bad.Messages = []store.OutgoingMessage{{InstanceID: "a", Message: store.Message{Kind: kindEvent}}}
	bad.Status = store.StatusCompleted
	err := h.s.AckOrchestrationItem(h.ctx(), bad)
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrLeaseLost)

	in := h.instance(tenant, "a")
	require.Equal(t, store.StatusRunning, in.Status)
	require.Equal(t, int64(1), in.EventCount)
	require.Len(t, h.history(tenant, "a", 0), 1)
	require.Nil(t, h.fetchWork(tenant))
	_, err = h.s.RenewOrchestrationLease(h.ctx(), &store.RenewOrchestrationLeaseParams{Lease: item.Lease, Duration: lease})
	require.NoError(t, err, "the failed ack released the lease")

	h.ack(turn(item))
	require.Len(t, h.history(tenant, "a", 0), 2)
	require.Nil(t, h.fetch(tenant), "the failed ack enqueued a message or left the consumed one")
}

func testAckTerminalStatus(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	for _, st := range []store.Status{store.StatusCompleted, store.StatusFailed, store.StatusCancelled} {
		id := "end-" + string(st)
		h.start(tenant, id)
		item := h.mustFetch(tenant, id)
		p := turn(item)
		p.Status = st
		if st == store.StatusCompleted {
			p.Output = []byte(`{"ok":true}`)
		} else {
			p.Error = "boom"
		}
		h.clock.Advance(time.Second)
		h.ack(p)
		in := h.instance(tenant, id)
		require.Equal(t, st, in.Status)
		require.Equal(t, h.clock.Now(), in.CompletedAt)
		if st == store.StatusCompleted {
			require.JSONEq(t, `{"ok":true}`, string(in.Output))
		} else {
			require.Equal(t, "boom", in.Error)
		}
		// A message another instance's turn sends after the end (a child's
		// late result) is consumed without a turn: the instance and its
		// execution stay as they were.
		ended := *in
		h.start(tenant, "sender-"+id)
		send := turn(h.mustFetch(tenant, "sender-"+id))
		send.Messages = []store.OutgoingMessage{{InstanceID: id, Message: store.Message{Kind: kindEvent, Payload: []byte(`"late"`)}}}
		h.ack(send)
		h.clock.Advance(time.Second)
		require.Nil(t, h.fetch(tenant), "a turn was handed out for an ended instance")
		require.Zero(t, h.queued(tenant), "the late message is still queued")
		require.Equal(t, ended, *h.instance(tenant, id))
		executions, err := h.s.ListExecutions(h.ctx(), &store.ListExecutionsParams{TenantID: tenant, InstanceID: id})
		require.NoError(t, err)
		require.Equal(t, ended.CompletedAt, executions[0].CompletedAt)
	}
	require.Nil(t, h.fetch(tenant))
}

func testContinueAsNew(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "loop", 1) // execution 1 has activity 2 outstanding
	h.enqueue(tenant, "loop", `"tick"`, 0)
	item := h.mustFetch(tenant, "loop")
	p := turn(item)
	p.History = append(p.History, store.HistoryEvent{EventID: int64(len(item.History) + 2), Kind: "continued_as_new"})
	p.Status = store.StatusContinuedAsNew
	p.ContinueAsNew = &store.ContinueAsNew{Input: []byte(`{"n":2}`), Start: store.Message{Kind: kindStart, Payload: []byte(`{"n":2}`)}}
	p.CancelActivities = []int64{2}
	h.ack(p)

	in := h.instance(tenant, "loop")
	require.Equal(t, store.StatusRunning, in.Status)
	require.Equal(t, int64(2), in.CurrentExecutionID)
	require.Equal(t, int64(2), in.ExecutionCount)
	require.JSONEq(t, `{"n":2}`, string(in.Input))
	require.True(t, in.CompletedAt.IsZero())
	require.Nil(t, h.fetchWork(tenant), "the old execution's activity survived continue-as-new")

	next := h.mustFetch(tenant, "loop")
	require.Empty(t, next.History, "the new execution starts with an empty history")
	require.Equal(t, int64(2), next.Instance.CurrentExecutionID)
	require.Len(t, next.Messages, 1)
	require.Equal(t, int64(2), next.Messages[0].ExecutionID)
	require.Equal(t, `{"n":2}`, string(next.Messages[0].Payload))
	h.ack(turn(next))

	require.Len(t, h.history(tenant, "loop", 1), 4)
	require.Len(t, h.history(tenant, "loop", 2), 1)
	require.Equal(t, int64(5), h.instance(tenant, "loop").EventCount)
}

func testChildStart(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "parent")
	item := h.mustFetch(tenant, "parent")
	p := turn(item)
	p.History = append(p.History, store.HistoryEvent{EventID: 2, Kind: "child_scheduled"})
	p.Children = []store.ChildStart{{
		InstanceID: "parent:2", Name: "payment", Version: "3", Input: []byte(`{"amount":5}`),
		Start: store.Message{Kind: kindStart}, IfTaken: store.Message{Kind: "child_failed"},
	}}
	h.ack(p)

	child := h.instance(tenant, "parent:2")
	require.Equal(t, "parent", child.ParentInstanceID)
	require.Equal(t, "parent", child.RootInstanceID)
	require.Equal(t, "payment", child.Name)
	require.Equal(t, store.StatusRunning, child.Status)
	ci := h.mustFetch(tenant, "parent:2")
	require.Equal(t, kindStart, ci.Messages[0].Kind)

	// A grandchild has the root of its parent; a taken id tells the parent.
	cp := turn(ci)
	cp.Children = []store.ChildStart{
		{InstanceID: "parent:2:1", Name: "fraud", Start: store.Message{Kind: kindStart}, IfTaken: store.Message{Kind: "child_failed"}},
		{InstanceID: "parent", Name: "clash", Start: store.Message{Kind: kindStart}, IfTaken: store.Message{Kind: "child_failed", Payload: []byte(`"taken"`)}},
	}
	h.ack(cp)
	require.Equal(t, "parent", h.instance(tenant, "parent:2:1").RootInstanceID)
	require.Equal(t, "order", h.instance(tenant, "parent").Name, "a child start overwrote an existing instance")

	var got []string
	for range 3 {
		it := h.fetch(tenant)
		if it == nil {
			break
		}
		for _, m := range it.Messages {
			got = append(got, it.Lease.InstanceID+":"+m.Kind+":"+string(m.Payload))
		}
		h.ack(turn(it))
	}
	require.ElementsMatch(t, []string{"parent:2:child_failed:\"taken\"", "parent:2:1:start:"}, got)
}

// Messages for an instance that does not exist are consumed without effect.
func testZombieMessagesConsumed(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "child")
	item := h.mustFetch(tenant, "child")
	p := turn(item)
	p.Status = store.StatusCompleted
	// The child reports to a parent that is gone.
	p.Messages = []store.OutgoingMessage{
		{InstanceID: "gone-parent", ExecutionID: 1, Message: store.Message{Kind: "child_completed"}},
		{InstanceID: "gone-parent", ExecutionID: 1, Message: store.Message{Kind: "child_completed"}, Delay: time.Minute},
	}
	h.ack(p)

	// A fetch that skips the look leaves them queued; the next that looks
	// consumes them.
	usage, ok := h.s.(store.Usage)
	require.True(t, ok, "the store does not implement store.Usage")
	queued := func() int64 {
		u, err := usage.GetUsage(h.ctx(), &store.GetUsageParams{TenantID: tenant})
		require.NoError(t, err)
		return u.QueuedMessages
	}
	skipping, err := h.s.FetchOrchestrationItems(h.ctx(), &store.FetchOrchestrationItemsParams{
		FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: lease}, SkipZombies: true})
	require.NoError(t, err)
	require.Empty(t, skipping)
	require.Equal(t, int64(2), queued(), "a fetch that skips zombies consumed them")
	require.Nil(t, h.fetch(tenant))
	require.Equal(t, int64(1), queued(), "the visible zombie is still queued")
	_, err = h.s.GetInstance(h.ctx(), &store.GetInstanceParams{TenantID: tenant, InstanceID: "gone-parent"})
	require.ErrorIs(t, err, store.ErrNotFound)
	// The delayed one is consumed once visible, and the instance id can
	// then be started cleanly.
	h.clock.Advance(time.Minute)
	require.Nil(t, h.fetch(""))
	h.start(tenant, "gone-parent")
	fresh := h.mustFetch(tenant, "gone-parent")
	require.Len(t, fresh.Messages, 1)
	require.Equal(t, kindStart, fresh.Messages[0].Kind)
}

// A fetch that looks for zombie messages consumes them when it finds work
// too: under sustained load no fetch finds none.
func testZombieMessagesConsumedBesideWork(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "child")
	p := turn(h.mustFetch(tenant, "child"))
	p.Status = store.StatusCompleted
	p.Messages = []store.OutgoingMessage{{InstanceID: "gone-parent", ExecutionID: 1, Message: store.Message{Kind: "child_completed"}}}
	h.ack(p)
	h.start(tenant, "busy")
	require.Equal(t, int64(2), h.queued(tenant))

	h.ack(turn(h.mustFetch(tenant, "busy")))
	require.Zero(t, h.queued(tenant), "the zombie message waits for a fetch that finds no work")
	h.invariants()
}

func testTenantIsolation(t *testing.T, h *harness) {
	a, b := h.tenant("tenant-a"), h.tenant("tenant-b")
	h.start(a, "same-id")
	h.start(b, "same-id")
	h.scheduleActivities(a, "with-task", 1)

	_, err := h.s.Enqueue(h.ctx(), &store.EnqueueParams{TenantID: b, InstanceID: "with-task", Message: store.Message{Kind: kindEvent}})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = h.s.GetInstance(h.ctx(), &store.GetInstanceParams{TenantID: b, InstanceID: "with-task"})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Nil(t, h.fetchWork(b), "tenant b fetched tenant a's task")

	item := h.mustFetch(b, "same-id")
	require.Equal(t, b, item.Lease.TenantID)
	require.Equal(t, b, item.Instance.TenantID)
	// A lease of tenant b presented under tenant a's name is no lease.
	forged := turn(item)
	forged.Lease.TenantID = a
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), forged), store.ErrLeaseLost)
	p := turn(item)
	p.Status = store.StatusCompleted
	h.ack(p)
	require.Nil(t, h.fetch(b))
	require.Equal(t, store.StatusRunning, h.instance(a, "same-id").Status)
	require.Equal(t, store.StatusCompleted, h.instance(b, "same-id").Status)

	w := h.fetchWork(a)
	require.NotNil(t, w)
	forgedWork := w.Lease
	forgedWork.TenantID = b
	require.ErrorIs(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: forgedWork, Result: &store.Message{Kind: kindDone}}), store.ErrLeaseLost)
	require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Result: &store.Message{Kind: kindDone}}))
}

// Tenant a has 10,000 visible messages, tenant b ten: the all-tenant fetch
// serves b's within the first few dozen fetches.
// testSuspendedTenantsWait: the claims that serve every tenant in turn skip
// a suspended tenant (turns and activity tasks alike) and serve it again
// once it is active.
func testSuspendedTenantsWait(t *testing.T, h *harness) {
	active, suspended := h.tenant("tenant-a"), h.tenant("tenant-s")
	h.scheduleActivities(active, "a", 1)
	h.scheduleActivities(suspended, "s", 1)
	h.start(active, "a2")
	h.start(suspended, "s2")
	setState := func(state string) {
		_, err := h.s.UpdateTenant(h.ctx(), &store.UpdateTenantParams{TenantID: suspended, State: &state})
		require.NoError(t, err)
	}
	setState(store.TenantSuspended)

	fetchAny := func() *store.OrchestrationItem {
		item, err := h.s.FetchOrchestrationItem(h.ctx(), &store.FetchOrchestrationItemParams{LeaseDuration: lease})
		require.NoError(t, err)
		return item
	}
	workAny := func() *store.WorkItem { return h.fetchWork("") }
	item := fetchAny()
	require.NotNil(t, item)
	require.Equal(t, active, item.Lease.TenantID)
	h.ack(turn(item))
	require.Nil(t, fetchAny(), "a suspended tenant's turn was handed out")
	w := workAny()
	require.NotNil(t, w)
	require.Equal(t, active, w.Lease.TenantID)
	require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease}))
	require.Nil(t, workAny(), "a suspended tenant's activity task was handed out")

	setState(store.TenantActive)
	item = fetchAny()
	require.NotNil(t, item)
	require.Equal(t, suspended, item.Lease.TenantID)
	w = workAny()
	require.NotNil(t, w)
	require.Equal(t, suspended, w.Lease.TenantID)
}

func testFairnessAcrossTenants(t *testing.T, h *harness) {
	a, b := h.tenant("tenant-a"), h.tenant("tenant-b")
	const aInstances, aMessages = 100, 10_000
	for i := range aInstances {
		h.start(a, fmt.Sprintf("a-%03d", i))
	}
	// One turn sends the backlog: 100 messages to each instance.
	item := h.fetch(a)
	require.NotNil(t, item)
	p := turn(item)
	for i := range aMessages - aInstances {
		p.Messages = append(p.Messages, store.OutgoingMessage{
			InstanceID: fmt.Sprintf("a-%03d", i%aInstances), Message: store.Message{Kind: kindEvent},
		})
	}
	h.ack(p)
	for i := range 10 {
		h.start(b, fmt.Sprintf("b-%d", i))
	}

	served := map[string]int{}
	bDone := 0
	fetches := 0
	for bDone < 10 {
		require.Less(t, fetches, 40, "tenant b still waiting after %d fetches: %v", fetches, served)
		item, err := h.s.FetchOrchestrationItem(h.ctx(), &store.FetchOrchestrationItemParams{LeaseDuration: lease})
		require.NoError(t, err)
		require.NotNil(t, item)
		fetches++
		served[item.Lease.TenantID]++
		if item.Lease.TenantID == b {
			bDone++
		}
		h.ack(turn(item))
	}
	require.Positive(t, served[a], "tenant a was starved instead")
}

// One tenant's backlog of due instances, larger than the claim's probe of a
// tenant's head (512 rows), does not sit ahead of another tenant's one due
// instance: a fetch leases one tenant's instances, the tenants in turn, so
// b's comes within two fetches of any size, and a is served again next.
func testClaimServesTenantsInTurn(t *testing.T, h *harness) {
	a, b := h.tenant("tenant-a"), h.tenant("tenant-b")
	for i := range 1000 {
		h.start(a, fmt.Sprintf("a-%04d", i))
	}
	h.clock.Advance(time.Millisecond) // b's instance is due after all of a's
	h.start(b, "b")
	fetch := func() []*store.OrchestrationItem {
		items, err := h.s.FetchOrchestrationItems(h.ctx(), &store.FetchOrchestrationItemsParams{
			FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{LeaseDuration: lease}, Max: 8})
		require.NoError(t, err)
		require.NotEmpty(t, items)
		return items
	}
	var tenants []string
	for len(tenants) < 3 {
		items := fetch()
		tenants = append(tenants, items[0].Lease.TenantID)
		for _, it := range items {
			require.Equal(t, tenants[len(tenants)-1], it.Lease.TenantID, "a fetch leases one tenant's instances")
		}
		if items[0].Lease.TenantID == b {
			require.Len(t, items, 1)
			require.Equal(t, "b", items[0].Instance.InstanceID)
		}
	}
	require.Contains(t, tenants[:2], b, "b's instance waited behind a's backlog: %v", tenants)
	require.Equal(t, a, tenants[2], "a is served again after b: %v", tenants)
}

func testInvalidArguments(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	ctx := h.ctx()
	_, err := h.s.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: tenant, Name: "x", Start: store.Message{Kind: kindStart}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = h.s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: tenant})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = h.s.FetchWorkItems(ctx, &store.FetchWorkItemsParams{TenantID: tenant, LeaseDuration: lease})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	require.ErrorIs(t, h.s.CreateTenant(ctx, &store.CreateTenantParams{TenantID: tenant}), store.ErrAlreadyExists)

	h.start(tenant, "v")
	item := h.mustFetch(tenant, "v")
	p := turn(item)
	p.Status = "Exploded"
	require.ErrorIs(t, h.s.AckOrchestrationItem(ctx, p), store.ErrInvalidArgument)
	p = turn(item)
	p.Status = store.StatusContinuedAsNew
	require.ErrorIs(t, h.s.AckOrchestrationItem(ctx, p), store.ErrInvalidArgument)
	// None of that touched the lease.
	h.ack(turn(item))
	require.True(t, errors.Is(h.s.AckOrchestrationItem(ctx, turn(item)), store.ErrLeaseLost))
}

// An ack whose lease was taken over writes nothing at all, whatever it
// carries: every statement of the ack is guarded, not only the last.
func testLostLeaseAckWritesNothing(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "lost", 1) // activity 2 is queued
	h.enqueue(tenant, "lost", `"go"`, 0)
	first := h.mustFetch(tenant, "lost")
	h.clock.Advance(lease)
	second := h.mustFetch(tenant, "lost")

	p := turn(first)
	p.Status = store.StatusContinuedAsNew
	p.ContinueAsNew = &store.ContinueAsNew{Input: []byte(`{}`), Start: store.Message{Kind: kindStart}}
	p.CancelActivities = []int64{2}
	p.Activities = []store.ActivityTask{{ActivityID: 9, Name: "new", TaskQueue: queue}}
	p.Messages = []store.OutgoingMessage{{InstanceID: "lost", Message: store.Message{Kind: kindEvent}}}
	p.Children = []store.ChildStart{{InstanceID: "lost:child", Name: "c", Start: store.Message{Kind: kindStart}, IfTaken: store.Message{Kind: "x"}}}
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), p), store.ErrLeaseLost)

	in := h.instance(tenant, "lost")
	require.Equal(t, int64(1), in.CurrentExecutionID, "the next execution was started")
	require.Equal(t, int64(1), in.ExecutionCount)
	require.Len(t, h.history(tenant, "lost", 1), 2)
	_, err := h.s.GetInstance(h.ctx(), &store.GetInstanceParams{TenantID: tenant, InstanceID: "lost:child"})
	require.ErrorIs(t, err, store.ErrNotFound, "the child was created")
	w := h.fetchWork(tenant)
	require.NotNil(t, w, "the cancellation went through")
	require.Equal(t, int64(2), w.ActivityID)
	require.Nil(t, h.fetchWork(tenant), "the new task was queued")
	require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease}))

	// The second lease works, and sees only what was there before.
	require.Len(t, second.Messages, 1)
	h.ack(turn(second))
	require.Nil(t, h.fetch(tenant), "the outgoing message was queued")

	// An ack naming another execution than the current one writes nothing either.
	h.enqueue(tenant, "lost", `"again"`, 0)
	third := h.mustFetch(tenant, "lost")
	wrong := turn(third)
	wrong.ExecutionID = 7
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), wrong), store.ErrLeaseLost)
	require.Len(t, h.history(tenant, "lost", 1), 3)
}

// Batches: one fetch leases several instances, one ack commits several
// turns, and a turn whose lease was lost fails alone.
func testBatchFetchAndAck(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	for i := range 12 {
		h.start(tenant, fmt.Sprintf("b-%02d", i))
	}
	items, err := h.s.FetchOrchestrationItems(h.ctx(), &store.FetchOrchestrationItemsParams{
		FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: lease}, Max: 5,
	})
	require.NoError(t, err)
	require.Len(t, items, 5)
	ids := map[string]bool{}
	for _, it := range items {
		ids[it.Lease.InstanceID] = true
		require.Len(t, it.Messages, 1)
		require.Equal(t, it.Lease.InstanceID, it.Instance.InstanceID)
	}
	require.Len(t, ids, 5, "an instance was leased twice in one batch")

	rest, err := h.s.FetchOrchestrationItems(h.ctx(), &store.FetchOrchestrationItemsParams{
		FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: lease}, Max: 100,
	})
	require.NoError(t, err)
	require.Len(t, rest, 7, "the other instances, and none of the leased ones")
	for _, it := range rest {
		require.False(t, ids[it.Lease.InstanceID])
	}

	// Ack all five, one of them with a lease that is not held.
	turns := make([]*store.AckOrchestrationItemParams, len(items))
	for i, it := range items {
		turns[i] = turn(it)
		turns[i].Activities = []store.ActivityTask{{ActivityID: 2, Name: "a", TaskQueue: queue}}
	}
	turns[2].Lease.Token = rest[0].Lease.Token // another fetch's token
	errs, err := h.s.AckOrchestrationItems(h.ctx(), &store.AckOrchestrationItemsParams{Turns: turns})
	require.NoError(t, err)
	for i, e := range errs {
		if i == 2 {
			require.ErrorIs(t, e, store.ErrLeaseLost)
			continue
		}
		require.NoError(t, e)
		require.Len(t, h.history(tenant, items[i].Lease.InstanceID, 0), 1)
	}
	require.Empty(t, h.history(tenant, items[2].Lease.InstanceID, 0))
	tasks := 0
	for h.fetchWork(tenant) != nil {
		tasks++
	}
	require.Equal(t, 4, tasks)

	_, err = h.s.FetchOrchestrationItems(h.ctx(), &store.FetchOrchestrationItemsParams{
		FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: lease}, Max: 1000,
	})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}

// testFetchCarriesRetention: a fetched item says what retention governs its
// instance as of the fetch (its tenant's rule for its name over the
// default, its own override over both), so that a turn that continues as
// new prunes by the rule in force without reading it again.
func testFetchCarriesRetention(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	policy := store.RetentionPolicy{
		Default: store.Retention{Completed: new(time.Hour), Chain: store.ChainRetention{KeepLast: 3, AutoPrune: new(true)}},
		ByName:  map[string]store.Retention{"order": {Chain: store.ChainRetention{KeepLast: 5}}},
	}
	_, err := h.s.UpdateTenant(h.ctx(), &store.UpdateTenantParams{TenantID: tenant, Retention: &policy})
	require.NoError(t, err)

	h.start(tenant, "by-rule")
	item := h.mustFetch(tenant, "by-rule")
	require.Equal(t, policy.For("order", nil), item.Retention)
	keep, ok := item.Retention.Chain.AutoPrunes()
	require.True(t, ok)
	require.Equal(t, 5, keep)

	// A rule changed between two turns governs the next one.
	policy.ByName["order"] = store.Retention{Chain: store.ChainRetention{KeepLast: 7}}
	_, err = h.s.UpdateTenant(h.ctx(), &store.UpdateTenantParams{TenantID: tenant, Retention: &policy})
	require.NoError(t, err)
	h.enqueue(tenant, "by-rule", `"next"`, 0)
	h.ack(turn(item))
	item = h.mustFetch(tenant, "by-rule")
	require.Equal(t, 7, item.Retention.Chain.KeepLast)
	h.ack(turn(item))

	own := &store.Retention{Chain: store.ChainRetention{AutoPrune: new(false)}}
	_, err = h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
		TenantID: tenant, InstanceID: "own", Name: "order", Version: "1", Retention: own,
		Start: store.Message{Kind: kindStart, Payload: []byte(`{}`)},
	})
	require.NoError(t, err)
	item = h.mustFetch(tenant, "own")
	require.Equal(t, own, item.Instance.Retention)
	require.Equal(t, policy.For("order", own), item.Retention)
	_, ok = item.Retention.Chain.AutoPrunes()
	require.False(t, ok)
	h.ack(turn(item))

	// A tenant without a policy: nothing governs the chain.
	other := h.tenant("plain")
	h.start(other, "x")
	item = h.mustFetch(other, "x")
	require.Equal(t, store.Retention{}, item.Retention)
	h.ack(turn(item))
}

// testStartMaxRunning: a start with MaxRunning is refused when the tenant
// has that many running instances (0 refuses every start), counts only its
// own tenant's running instances, and names a taken id as taken first.
func testStartMaxRunning(t *testing.T, h *harness) {
	tenant, other := h.tenant("acme"), h.tenant("other")
	start := func(tenant, id string, max *int64) error {
		_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
			TenantID: tenant, InstanceID: id, Name: "order", Version: "1", MaxRunning: max,
			Start: store.Message{Kind: kindStart, Payload: []byte(`{}`)},
		})
		return err
	}
	two, zero := int64(2), int64(0)
	require.ErrorIs(t, start(tenant, "none", &zero), store.ErrTooManyRunning)
	h.start(other, "o1")
	h.start(other, "o2")
	require.NoError(t, start(tenant, "a", &two))
	require.NoError(t, start(tenant, "b", &two))
	err := start(tenant, "c", &two)
	require.ErrorIs(t, err, store.ErrTooManyRunning)
	require.ErrorContains(t, err, "2")
	require.ErrorIs(t, start(tenant, "a", &two), store.ErrAlreadyExists)
	h.gone(tenant, "c")
	h.gone(tenant, "none")
	// Absent, no bound applies.
	require.NoError(t, start(tenant, "c", nil))

	// An instance that ends makes room.
	h.finish(tenant, "a", store.StatusCompleted)
	three := int64(3)
	require.NoError(t, start(tenant, "d", &three))
	h.requireCounts(tenant, map[store.Status]int64{store.StatusRunning: 3, store.StatusCompleted: 1})
}
