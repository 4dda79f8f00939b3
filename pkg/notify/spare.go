package notify

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/orchardhq/orchard/pkg/store"
)

// Spare turns let a write that makes an instance due run its turn when no
// loop of its process is idle (a busy dispatcher): a dispatcher lends a
// bounded number of turns (Lend), an API call borrows one (Borrow), and its
// write leases the instance in the batch it joins, whose commit hands the
// batch's instances to the dispatcher (store.EagerLease.Runner), which
// runs their turns together, as a claim's. The instance then needs
// no claim: at load, the claim would be a statement, and a wait behind the
// loops' fetches, for each turn. The bounds keep what runs so, beside the
// loops, to what the dispatcher would fetch in one round of its loops, and
// one tenant from taking all of it.
type spares struct {
	mu      sync.Mutex
	lenders []*lender
}

// lender is a dispatcher's spare turns.
type lender struct {
	s         *spares
	tenant    string // "" for every tenant's instances
	lease     time.Duration
	run       func(ctx context.Context, items []*store.OrchestrationItem, unread []store.OrchestrationLease, done func())
	open      func() bool
	max, each int
	// Guarded by spares.mu.
	lent     int
	byTenant map[string]int
}

// Lend lends up to most spare turns of a dispatcher, for a tenant's
// instances (every tenant's when empty), at most each (at least 1) to one
// tenant at a time, leased for lease. run runs the turns of the instances
// leased for them (items, or unread: see store.LeasedRunner), and calls
// done once they ended, which gives their spare turns back. It lends only while open says so (nil: always). The
// returned func takes the spare turns back: none is lent after it.
func (h *Handoff) Lend(tenant string, lease time.Duration, most, each int,
	run func(ctx context.Context, items []*store.OrchestrationItem, unread []store.OrchestrationLease, done func()),
	open func() bool) (withdraw func()) {
	if h == nil || most <= 0 {
		return func() {}
	}
	l := &lender{s: &h.spares, tenant: tenant, lease: lease, run: run, open: open, max: most, each: min(max(each, 1), most), byTenant: map[string]int{}}
	h.spares.mu.Lock()
	h.spares.lenders = append(h.spares.lenders, l)
	h.spares.mu.Unlock()
	return func() {
		h.spares.mu.Lock()
		defer h.spares.mu.Unlock()
		h.spares.lenders = slices.DeleteFunc(h.spares.lenders, func(x *lender) bool { return x == l })
	}
}

// RunLeased runs the turns of instances leased for spare turns
// (store.LeasedRunner), whose borrowers no longer hold them.
func (l *lender) RunLeased(ctx context.Context, items []*store.OrchestrationItem, unread []store.OrchestrationLease) {
	l.run(ctx, items, unread, func() {
		l.s.mu.Lock()
		defer l.s.mu.Unlock()
		for _, it := range items {
			l.giveBack(it.Lease.TenantID)
		}
		for _, lease := range unread {
			l.giveBack(lease.TenantID)
		}
	})
}

// giveBack gives a tenant's spare turn back. spares.mu is held.
func (l *lender) giveBack(tenant string) {
	l.lent--
	if l.byTenant[tenant]--; l.byTenant[tenant] <= 0 {
		delete(l.byTenant, tenant)
	}
}

// SpareTurn is a spare turn borrowed for one write of a tenant's. A nil
// SpareTurn lends nothing.
type SpareTurn struct {
	s      *spares
	l      *lender
	tenant string
	once   sync.Once
}

// Borrow borrows a spare turn for a write of tenant's, or returns nil when
// none is free. Its borrower gives it back (Return) unless the write holds
// its instance (EagerLease.Held): the turn's end gives it back then.
func (h *Handoff) Borrow(tenant string) *SpareTurn {
	if h == nil {
		return nil
	}
	s := &h.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lenders {
		if (l.tenant == "" || l.tenant == tenant) && l.lent < l.max && l.byTenant[tenant] < l.each && (l.open == nil || l.open()) {
			l.lent++
			l.byTenant[tenant]++
			return &SpareTurn{s: s, l: l, tenant: tenant}
		}
	}
	return nil
}

// Eager returns the lease its write takes (store.EagerLease), under
// token, for the lender's dispatcher to run its turn (Runner): the spare
// turn goes with the instance when the write holds it (Held), and comes
// back as its turn ends.
func (t *SpareTurn) Eager(token string) *store.EagerLease {
	if t == nil {
		return nil
	}
	return &store.EagerLease{Token: token, Duration: t.l.lease, Runner: t.l}
}

// Return gives the spare turn back, unless its write held it; more calls
// do nothing.
func (t *SpareTurn) Return() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		t.s.mu.Lock()
		defer t.s.mu.Unlock()
		t.l.giveBack(t.tenant)
	})
}

// Lent is the number of spare turns borrowed, for tests and metrics.
func (h *Handoff) Lent() int {
	h.spares.mu.Lock()
	defer h.spares.mu.Unlock()
	n := 0
	for _, l := range h.spares.lenders {
		n += l.lent
	}
	return n
}
