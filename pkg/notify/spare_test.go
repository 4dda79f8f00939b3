package notify

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

// A dispatcher lends at most its spare turns, at most each to one tenant,
// only for its own tenants and only while it is open; a spare turn comes back when its borrower
// returns it (once, however often it tries), or, when its write held its
// instance, when the turns of the instances its runner got end; withdrawn,
// none is lent.
func TestSpareTurnsWithinBounds(t *testing.T) {
	h := NewHandoff(0)
	require.Nil(t, h.Borrow("a"), "a spare turn lent with no lender")
	var ran []*store.OrchestrationItem
	var ranUnread []store.OrchestrationLease
	var done func()
	withdraw := h.Lend("", time.Second, 3, 2, func(_ context.Context, items []*store.OrchestrationItem, unread []store.OrchestrationLease, d func()) {
		ran, ranUnread, done = items, unread, d
	}, nil)
	closed := true
	only := h.Lend("c", time.Minute, 1, 1, func(context.Context, []*store.OrchestrationItem, []store.OrchestrationLease, func()) {}, func() bool { return !closed })

	a1, a2 := h.Borrow("a"), h.Borrow("a")
	require.NotNil(t, a1)
	require.NotNil(t, a2)
	require.Nil(t, h.Borrow("a"), "a tenant borrowed past its share")
	b := h.Borrow("b")
	require.NotNil(t, b)
	require.Nil(t, h.Borrow("c"), "a closed lender lent")
	closed = false
	c := h.Borrow("c")
	require.NotNil(t, c, "a tenant's own lender did not lend")
	require.Equal(t, time.Minute, c.Eager("x").Duration)
	require.Nil(t, h.Borrow("c"), "lent past the bound")
	require.Equal(t, 4, h.Lent())

	e := a1.Eager("token")
	require.Equal(t, "token", e.Token)
	require.Equal(t, time.Second, e.Duration)
	require.Nil(t, e.Hold)
	require.NotNil(t, e.Runner)

	// a2 comes back at once, however often; a1's write held its instance.
	a2.Return()
	a2.Return()
	require.Equal(t, 3, h.Lent())
	items := []*store.OrchestrationItem{{Lease: store.OrchestrationLease{TenantID: "a", InstanceID: "i"}}}
	unread := []store.OrchestrationLease{{TenantID: "b", InstanceID: "j"}}
	e.Runner.RunLeased(t.Context(), items, unread)
	require.Equal(t, items, ran)
	require.Equal(t, unread, ranUnread)
	require.Equal(t, 3, h.Lent(), "a spare turn came back before its turn ended")
	require.NotNil(t, h.Borrow("a"), "a returned spare turn was not lent again")
	require.Nil(t, h.Borrow("d"), "lent past the bound")
	done()
	require.Equal(t, 2, h.Lent(), "the spare turns of a's item and b's lease did not come back")
	require.NotNil(t, h.Borrow("d"))

	withdraw()
	only()
	require.Nil(t, h.Borrow("e"), "a withdrawn lender lent")

	var none *Handoff
	none.Lend("", time.Second, 1, 1, nil, nil)()
	require.Nil(t, none.Borrow("a"))
	var nothing *SpareTurn
	require.Nil(t, nothing.Eager("x"))
	nothing.Return()
}
