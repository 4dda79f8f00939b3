package notify

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/store"
)

// delivered says whether a delivery came to w, consuming its signal.
func delivered(w *TaskWait) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

// A place is taken by one ack, the one that waited longest first, and only
// for its own tenant and task queue; what the ack delivers goes to it
// alone.
func TestHandoffTakesThePlaceThatWaitedLongest(t *testing.T) {
	h := NewHandoff(0)
	first, second := h.Wait("a", "q", time.Minute, 2), h.Wait("a", "q", time.Minute, 1)
	other := h.Wait("b", "q", time.Minute, 1)
	require.Nil(t, h.Take("a", "q"), "a place not offered was taken")
	second.Offer()
	first.Offer()
	other.Offer()
	require.Equal(t, 3, h.Waiting())
	require.Same(t, second.Place, h.Take("a", "q"))
	require.Same(t, first.Place, h.Take("a", "q"))
	require.Nil(t, h.Take("a", "q"))
	require.Nil(t, h.Take("a", "other"))
	require.Equal(t, 1, h.Waiting())
	require.Equal(t, 2, first.Max())
	require.NotEqual(t, first.Token(), second.Token())

	items, pending := first.Withdraw()
	require.Empty(t, items)
	require.True(t, pending, "a place taken and not delivered to withdrew")
	task := &store.WorkItem{InstanceID: "i"}
	require.Empty(t, first.Deliver([]*store.WorkItem{task}))
	require.True(t, delivered(first))
	require.False(t, delivered(second))
	items, pending = first.Withdraw()
	require.False(t, pending)
	require.Equal(t, []*store.WorkItem{task}, items)
	items, _ = first.Withdraw()
	require.Empty(t, items, "a delivery was read twice")
}

// A place withdrawn is not taken; one left leaves its delivered tasks to
// its poll, or, taken and not delivered yet, to its delivery.
func TestHandoffLeave(t *testing.T) {
	h := NewHandoff(0)
	w := h.Wait("a", "q", time.Minute, 1)
	w.Offer()
	items, pending := w.Withdraw()
	require.Empty(t, items)
	require.False(t, pending)
	require.Nil(t, h.Take("a", "q"), "a place withdrawn was taken")

	w.Offer()
	require.Same(t, w.Place, h.Take("a", "q"))
	task := &store.WorkItem{InstanceID: "i"}
	require.Empty(t, w.Deliver([]*store.WorkItem{task}))
	require.Equal(t, []*store.WorkItem{task}, w.Leave(), "the tasks delivered as the poll left")

	gone := h.Wait("a", "q", time.Minute, 1)
	gone.Offer()
	require.Same(t, gone.Place, h.Take("a", "q"))
	require.Empty(t, gone.Leave())
	require.Equal(t, []*store.WorkItem{task}, gone.Deliver([]*store.WorkItem{task}), "a poll that left was delivered to")
	require.False(t, delivered(gone))

	left := h.Wait("a", "q", time.Minute, 1)
	left.Offer()
	require.Empty(t, left.Leave())
	require.Zero(t, h.Waiting())
	left.Offer()
	require.Zero(t, h.Waiting(), "a place left was offered again")

	var none *Handoff
	nw := none.Wait("a", "q", time.Minute, 1)
	nw.Offer()
	items, pending = nw.Withdraw()
	require.Empty(t, items)
	require.False(t, pending)
	require.Empty(t, nw.Leave())
	require.Nil(t, nw.Done())
	require.Nil(t, none.Take("a", "q"))
}

// A poll may skip its first query after a query found its queue empty,
// until a task comes without a place (one that came while the query ran
// included: its commit may have missed the query's snapshot), or quiet
// passes; only for its own queue.
func TestHandoffQuiet(t *testing.T) {
	h := NewHandoff(time.Hour)
	w := h.Wait("a", "q", time.Minute, 1)
	require.False(t, w.Quiet(), "a queue never queried is quiet")
	w.BeforeQuery()
	w.QueriedEmpty()
	require.True(t, h.Wait("a", "q", time.Minute, 1).Quiet())
	require.False(t, h.Wait("a", "other", time.Minute, 1).Quiet())
	require.False(t, h.Wait("b", "q", time.Minute, 1).Quiet())

	h.Unplaced("a", "q")
	require.False(t, w.Quiet(), "a queue with a task no place took is quiet")
	w.BeforeQuery()
	h.Unplaced("a", "q")
	w.QueriedEmpty()
	require.False(t, w.Quiet(), "a query that began before a task came recorded the queue empty")
	w.BeforeQuery()
	w.QueriedEmpty()
	require.True(t, w.Quiet())

	// A task that came to a queue no query had recorded, while a query of
	// it ran.
	fresh := h.Wait("a", "new", time.Minute, 1)
	fresh.BeforeQuery()
	h.Unplaced("a", "new")
	fresh.QueriedEmpty()
	require.False(t, fresh.Quiet())

	require.False(t, NewHandoff(0).Wait("a", "q", time.Minute, 1).Quiet(), "quiet 0 skips queries")
	past := NewHandoff(time.Nanosecond)
	pw := past.Wait("a", "q", time.Minute, 1)
	pw.BeforeQuery()
	pw.QueriedEmpty()
	testwait.Until(t, time.Minute, "a query older than quiet to stand no more", func() bool { return !pw.Quiet() })

	// Past maxNews queues, it forgets them all.
	for i := range maxNews {
		q := h.Wait("a", fmt.Sprint("q", i), time.Minute, 1)
		q.BeforeQuery()
		q.QueriedEmpty()
	}
	require.False(t, w.Quiet(), "news of more than maxNews queues kept")
	require.LessOrEqual(t, len(h.news), maxNews)
}

// An idle loop's place is taken for its own tenant first, else for a loop
// of every tenant; like a poll's, one that left hands its delivery back.
func TestHandoffIdleLoops(t *testing.T) {
	h := NewHandoff(0)
	all, mine, other := h.Idle("", time.Second, nil), h.Idle("a", time.Second, nil), h.Idle("b", time.Second, nil)
	require.Nil(t, h.TakeIdle("a"), "a place not offered was taken")
	all.Offer()
	mine.Offer()
	other.Offer()
	require.Equal(t, 3, h.IdleLoops())
	require.Equal(t, 0, h.Waiting(), "a loop's place counted as a poll's")
	require.Same(t, mine, h.TakeIdle("a"))
	require.Same(t, all, h.TakeIdle("a"))
	require.Nil(t, h.TakeIdle("a"))
	require.Nil(t, h.TakeIdle(""), "a loop of one tenant was taken for any")
	require.Equal(t, time.Second, mine.Lease())
	require.Equal(t, 1, mine.Max())

	item := &store.OrchestrationItem{Claims: 1}
	require.Empty(t, mine.Deliver([]*store.OrchestrationItem{item}))
	got, pending := mine.Withdraw()
	require.False(t, pending)
	require.Equal(t, []*store.OrchestrationItem{item}, got)

	// A loop that left while its place was taken: the delivery is unwanted.
	require.Empty(t, all.Leave())
	require.Equal(t, []*store.OrchestrationItem{item}, all.Deliver([]*store.OrchestrationItem{item}))

	var none *Handoff
	require.Nil(t, none.Idle("a", time.Second, nil))
	require.Nil(t, none.TakeIdle("a"))
	none.Idle("a", time.Second, nil).Offer()
}

// heldTurn is a store.HeldTurn that does nothing, to tell one apart.
type heldTurn struct{ n int }

func (*heldTurn) Turn(context.Context, *store.OrchestrationItem) *store.AckOrchestrationItemParams {
	return nil
}
func (*heldTurn) Done(context.Context, bool, error)                    {}
func (*heldTurn) Ahead(string, string, int64) *store.OrchestrationItem { return nil }

// A loop's place offers its loop's held turns, a new one each time; a
// taker that ran one gives the place back: offered again, its loop not
// woken. A place whose loop left stays gone.
func TestHandoffReturnedPlace(t *testing.T) {
	h := NewHandoff(0)
	n := 0
	w := h.Idle("a", time.Second, func() store.HeldTurn { n++; return &heldTurn{n: n} })
	require.Nil(t, h.Idle("a", time.Second, nil).Hold(), "a place with no held turns offered one")
	w.Offer()
	require.Same(t, w, h.TakeIdle("a"))
	first, second := w.Hold(), w.Hold()
	require.NotSame(t, first, second, "one held turn for two takers")

	w.Return()
	require.Equal(t, 1, h.IdleLoops(), "a returned place was not offered again")
	select {
	case <-w.Done():
		t.Fatal("a returned place woke its loop")
	default:
	}
	require.Same(t, w, h.TakeIdle("a"))

	// Its loop left while it was taken: nothing.
	require.Empty(t, w.Leave())
	w.Return()
	require.Equal(t, 0, h.IdleLoops())
}

// An end goes to every wait for its instance, of its tenant, that came
// before it, within the bound of the bytes the waits hold; a wait that
// left holds nothing.
func TestEndsGoToTheirWaitsWithinBounds(t *testing.T) {
	t.Parallel()
	h := NewHandoff(0)
	h.ends.max = 10
	first, second, other := h.AwaitEnd("t", "a"), h.AwaitEnd("t", "a"), h.AwaitEnd("u", "a")
	in := &store.Instance{TenantID: "t", InstanceID: "a", Output: []byte("12345")}
	h.Ended(in)
	late := h.AwaitEnd("t", "a")
	require.Same(t, in, first.Instance())
	require.Same(t, in, second.Instance())
	require.Nil(t, other.Instance(), "an end is its tenant's")
	require.Nil(t, late.Instance(), "a wait gets the ends that come after it")
	waits, bytes := h.EndWaits()
	require.Equal(t, 4, waits)
	require.Equal(t, 10, bytes)

	// Past the bound, a wait gets nothing: it reads.
	h.Ended(&store.Instance{TenantID: "u", InstanceID: "a", Input: []byte("x")})
	require.Nil(t, other.Instance())
	first.Leave()
	first.Leave()
	h.Ended(&store.Instance{TenantID: "u", InstanceID: "a", Input: []byte("x")})
	require.NotNil(t, other.Instance(), "a wait that left freed its bytes")

	for _, w := range []*EndWait{second, other, late} {
		w.Leave()
	}
	waits, bytes = h.EndWaits()
	require.Zero(t, waits+bytes)
	var none *Handoff
	require.Nil(t, none.AwaitEnd("t", "a").Instance())
	none.Ended(in)
}

// namedTurn is a HeldTurn told apart by its name.
type namedTurn struct {
	store.HeldTurn
	name string
}

// A start's first turn goes to the dispatcher of its tenant, else to the
// one of every tenant, at most maxFirstTurns at once, and to none once
// the dispatchers stopped holding them.
func TestHandoffHolders(t *testing.T) {
	h := NewHandoff(0)
	hold, _, _ := h.Holder("a")
	require.Nil(t, hold, "a turn held with no dispatcher")
	holding := func(name string) func() store.HeldTurn {
		return func() store.HeldTurn { return namedTurn{name: name} }
	}
	stopAll := h.Holds("", time.Minute, holding("all"))
	stopA := h.Holds("a", 2*time.Minute, holding("a"))
	hold, lease, release := h.Holder("a")
	require.Equal(t, "a", hold.(namedTurn).name)
	require.Equal(t, 2*time.Minute, lease)
	release()
	hold, lease, release = h.Holder("b")
	require.Equal(t, "all", hold.(namedTurn).name)
	require.Equal(t, time.Minute, lease)
	release()

	var releases []func()
	for range maxFirstTurns {
		hold, _, release := h.Holder("a")
		require.NotNil(t, hold)
		releases = append(releases, release)
	}
	hold, _, _ = h.Holder("a")
	require.Nil(t, hold, "more first turns held at once than maxFirstTurns")
	hold, _, release = h.Holder("b")
	require.NotNil(t, hold, "the bound of one dispatcher held another's turns")
	release()
	releases[0]()
	hold, _, release = h.Holder("a")
	require.NotNil(t, hold, "a released turn's room was not given again")
	release()

	// A dispatcher that stops leaves the tenant to the one of every tenant,
	// unless another took its place.
	stopA()
	hold, _, release = h.Holder("a")
	require.Equal(t, "all", hold.(namedTurn).name)
	release()
	stopOld := h.Holds("", time.Minute, holding("old"))
	h.Holds("", time.Minute, holding("new"))
	stopOld()
	hold, _, release = h.Holder("a")
	require.Equal(t, "new", hold.(namedTurn).name, "a stop let go of the dispatcher that replaced it")
	release()
	stopAll()
	hold, _, _ = h.Holder("a")
	require.NotNil(t, hold, "the replaced dispatcher's stop let go of another")
}
