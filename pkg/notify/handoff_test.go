package notify

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	h := NewHandoff()
	first, second := h.Wait("a", "q", time.Minute, 2), h.Wait("a", "q", time.Minute, 1)
	other := h.Wait("b", "q", time.Minute, 1)
	require.Nil(t, h.Take("a", "q"), "a place not offered was taken")
	second.Offer()
	first.Offer()
	other.Offer()
	require.Equal(t, 3, h.Waiting())
	require.Same(t, second, h.Take("a", "q"))
	require.Same(t, first, h.Take("a", "q"))
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
	h := NewHandoff()
	w := h.Wait("a", "q", time.Minute, 1)
	w.Offer()
	items, pending := w.Withdraw()
	require.Empty(t, items)
	require.False(t, pending)
	require.Nil(t, h.Take("a", "q"), "a place withdrawn was taken")

	w.Offer()
	require.Same(t, w, h.Take("a", "q"))
	task := &store.WorkItem{InstanceID: "i"}
	require.Empty(t, w.Deliver([]*store.WorkItem{task}))
	require.Equal(t, []*store.WorkItem{task}, w.Leave(), "the tasks delivered as the poll left")

	gone := h.Wait("a", "q", time.Minute, 1)
	gone.Offer()
	require.Same(t, gone, h.Take("a", "q"))
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
