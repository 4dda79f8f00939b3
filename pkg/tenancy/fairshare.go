package tenancy

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// ResourceCallsInFlight names the calls a tenant may have waiting for a
// FairShare slot; ResourceCallBytesWaiting the bytes of their requests.
const (
	ResourceCallsInFlight    = "calls_in_flight"
	ResourceCallBytesWaiting = "call_bytes_waiting"
)

// FairShare admits at most Limit calls at once, across tenants. Past it a
// call waits, and each slot freed goes to the waiting tenant with the fewest
// calls in flight (of those, the one served least recently; within a tenant,
// its oldest call). So a tenant within its share of the slots is not queued
// behind the calls of one beyond it: a tenant with none in flight gets the
// next slot however many calls another has waiting. When no call waits, any
// tenant may use every slot. It is safe for concurrent use.
//
// It stands in front of what the calls share (the database connections):
// without it they queue for those in arrival order, the quiet tenant's call
// behind every call of a busy one.
type FairShare struct {
	limit, maxWaiting int
	maxWaitingBytes   int64

	mu       sync.Mutex
	inFlight int
	tenants  map[string]*shareTenant
	// served counts grants, to find the tenant served least recently.
	served uint64
}

type shareTenant struct {
	inFlight int
	waiting  list.List // of *shareWaiter
	// waitingBytes sums the sizes of the waiting calls.
	waitingBytes int64
	lastServed   uint64
}

type shareWaiter struct {
	granted chan struct{} // closed when granted
	size    int64
}

// NewFairShare returns a FairShare of limit slots that lets each tenant have
// at most maxWaiting calls waiting, of at most maxWaitingBytes together
// (one call may always wait, whatever its size); all must be positive.
// What a waiting call holds is its request: the bytes bound what a tenant
// can park in the process, the count its goroutines.
func NewFairShare(limit, maxWaiting int, maxWaitingBytes int64) *FairShare {
	return &FairShare{limit: max(limit, 1), maxWaiting: max(maxWaiting, 1), maxWaitingBytes: max(maxWaitingBytes, 1),
		tenants: map[string]*shareTenant{}}
}

// Acquire takes a slot for one of tenant's calls, whose request is size
// bytes, waiting for one until ctx ends (its error is returned then). When
// the call would take the tenant's waiting calls past maxWaiting, or their
// bytes past maxWaitingBytes, it returns an *ExhaustedError for
// ResourceCallsInFlight or ResourceCallBytesWaiting at once. release gives
// the slot back; call it exactly once.
func (f *FairShare) Acquire(ctx context.Context, tenant string, size int64) (release func(), err error) {
	f.mu.Lock()
	t := f.tenants[tenant]
	if t == nil {
		t = &shareTenant{}
		f.tenants[tenant] = t
	}
	// A free slot means no call waits: a freed slot goes to a waiting call.
	if f.inFlight < f.limit {
		f.grantLocked(t)
		f.mu.Unlock()
		return f.releaser(tenant), nil
	}
	// Slots free in the time of a call: a few milliseconds.
	switch {
	case t.waiting.Len() >= f.maxWaiting:
		f.mu.Unlock()
		return nil, &ExhaustedError{Resource: ResourceCallsInFlight, Limit: int64(f.maxWaiting), RetryAfter: 10 * time.Millisecond}
	case t.waiting.Len() > 0 && t.waitingBytes+size > f.maxWaitingBytes:
		f.mu.Unlock()
		return nil, &ExhaustedError{Resource: ResourceCallBytesWaiting, Limit: f.maxWaitingBytes, RetryAfter: 10 * time.Millisecond}
	}
	w := &shareWaiter{granted: make(chan struct{}), size: size}
	e := t.waiting.PushBack(w)
	t.waitingBytes += size
	f.mu.Unlock()
	select {
	case <-w.granted:
		return f.releaser(tenant), nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		select {
		case <-w.granted:
			// Granted meanwhile: hand the slot on.
			t.inFlight--
			f.inFlight--
			f.handOnLocked()
		default:
			t.waiting.Remove(e)
			t.waitingBytes -= size
		}
		f.dropIdleLocked(tenant, t)
		return nil, ctx.Err()
	}
}

// InFlight is the number of slots taken.
func (f *FairShare) InFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight
}

// Waiting is the number of calls of tenant waiting for a slot.
func (f *FairShare) Waiting(tenant string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.tenants[tenant]; t != nil {
		return t.waiting.Len()
	}
	return 0
}

func (f *FairShare) releaser(tenant string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			t := f.tenants[tenant]
			t.inFlight--
			f.inFlight--
			f.handOnLocked()
			f.dropIdleLocked(tenant, t)
		})
	}
}

func (f *FairShare) grantLocked(t *shareTenant) {
	t.inFlight++
	f.inFlight++
	f.served++
	t.lastServed = f.served
}

// handOnLocked gives free slots to the waiting calls, the next of the
// tenant with the fewest calls in flight first.
func (f *FairShare) handOnLocked() {
	for f.inFlight < f.limit {
		var next *shareTenant
		for _, t := range f.tenants {
			if t.waiting.Len() == 0 {
				continue
			}
			if next == nil || t.inFlight < next.inFlight || (t.inFlight == next.inFlight && t.lastServed < next.lastServed) {
				next = t
			}
		}
		if next == nil {
			return
		}
		f.grantLocked(next)
		w := next.waiting.Remove(next.waiting.Front()).(*shareWaiter)
		next.waitingBytes -= w.size
		close(w.granted)
	}
}

// dropIdleLocked forgets a tenant with nothing in flight or waiting, so
// that the map holds only tenants with calls.
func (f *FairShare) dropIdleLocked(tenant string, t *shareTenant) {
	if t.inFlight == 0 && t.waiting.Len() == 0 {
		delete(f.tenants, tenant)
	}
}
