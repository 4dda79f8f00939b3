package notify

import (
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/orchardhq/orchard/pkg/store"
)

// Handoff hands activity tasks from a dispatcher's ack to a
// PollActivityTask waiting in the same process (Temporal's "sync match"):
// the ack takes a waiting poll's place, inserts the task already leased to
// it (its token, its lease), and after the commit delivers the task in
// memory. The poll then needs no claim of its own, and no hint.
//
// Like a hint, a place is only a chance, never the source of truth: the
// task is in the database, leased. A poll that left while its place was
// taken leaves the tasks to whoever delivers them, who hands them back at
// once (best effort; their leases lapse otherwise); an ack that did not
// commit delivers nothing, and the poll looks again. A place taken is
// taken by one ack, and what it delivers goes to its poll alone.
//
// A Handoff also spares polls the query that would find nothing: a poll
// that starts within quiet of a query that found its queue empty, with no
// task put in the queue since without a place (Unplaced), offers its place
// at once and queries only at its first wait's end. The tasks it could
// miss so are those nothing announces: due after a delay, left by a lease
// that lapsed, or scheduled by another process; quiet bounds how much
// later they are found than by a query at once.
type Handoff struct {
	mu      sync.Mutex
	waiting map[handoffKey][]*TaskWait
	quiet   time.Duration
	news    map[handoffKey]*queueNews
	// epoch counts the times news was cleared, so that a query's finding
	// is not recorded over news it did not see.
	epoch uint64
}

type handoffKey struct{ tenant, queue string }

// queueNews is what the polls of this process know of a task queue.
type queueNews struct {
	// unplaced counts the tasks put in the queue with no place (Unplaced).
	unplaced uint64
	// emptyAt is when a query found the queue empty, with no task unplaced
	// since it began (zero: none).
	emptyAt time.Time
}

// maxNews bounds the task queues a Handoff keeps news of: past it, it
// forgets them all (their polls query as they start), so that a tenant
// with ever new queue names cannot grow it.
const maxNews = 4096

// NewHandoff returns an empty Handoff whose polls skip their first query
// within quiet of a query that found their queue empty (0: never).
func NewHandoff(quiet time.Duration) *Handoff {
	return &Handoff{waiting: map[handoffKey][]*TaskWait{}, quiet: quiet, news: map[handoffKey]*queueNews{}}
}

// Unplaced records that a task was made visible in a tenant's task queue
// with no place taken for it (an ack found no poll waiting, a task was
// handed back): the next poll of the queue must query. Call it after the
// task's commit.
func (h *Handoff) Unplaced(tenant, queue string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.newsOf(handoffKey{tenant, queue})
	n.unplaced++
	n.emptyAt = time.Time{}
}

// newsOf returns the news of a queue, new when there was none; past
// maxNews it forgets the others first. h.mu is held.
func (h *Handoff) newsOf(k handoffKey) *queueNews {
	n := h.news[k]
	if n == nil {
		if len(h.news) >= maxNews {
			clear(h.news)
			h.epoch++
		}
		n = &queueNews{}
		h.news[k] = n
	}
	return n
}

type waitState uint8

const (
	waitIdle    waitState = iota // not offered: its poll queries, or has what came
	waitOffered                  // in Handoff.waiting: an ack may take it
	waitTaken                    // an ack took it: its delivery comes
	waitGone                     // its poll left while it was taken
)

// TaskWait is a poll's place in a Handoff, for one task queue of one
// tenant. A nil TaskWait (no Handoff) is never offered and never delivers.
type TaskWait struct {
	h     *Handoff
	key   handoffKey
	token string
	lease time.Duration
	max   int
	// Guarded by h.mu.
	state waitState
	items []*store.WorkItem
	// done holds a value once a delivery came (of tasks, or of nothing).
	done chan struct{}
	// epoch and unplaced are the queue's news as the poll's last query
	// began (BeforeQuery).
	epoch, unplaced uint64
}

// Wait returns a poll's place for a tenant's task queue: tasks handed to
// it are leased for lease with a token of its own, up to most in one
// delivery.
// It is offered only by Offer. A nil Handoff returns nil.
func (h *Handoff) Wait(tenant, queue string, lease time.Duration, most int) *TaskWait {
	if h == nil {
		return nil
	}
	return &TaskWait{h: h, key: handoffKey{tenant, queue}, token: uuid.NewString(), lease: lease, max: max(most, 1),
		done: make(chan struct{}, 1)}
}

// Done receives a value when a delivery came (nil for a nil TaskWait,
// which blocks forever in a select).
func (w *TaskWait) Done() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.done
}

// Offer puts the place where an ack may take it; the poll then waits for
// Done, beside its hint and its poll interval. It does nothing unless the
// place is idle.
func (w *TaskWait) Offer() {
	if w == nil {
		return
	}
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	if w.state != waitIdle {
		return
	}
	w.state = waitOffered
	w.h.waiting[w.key] = append(w.h.waiting[w.key], w)
}

// Withdraw takes the place back before the poll queries on its own. It
// returns the tasks delivered to it; pending is true when an ack took it
// and has not delivered yet: the poll then waits for Done instead of
// querying.
func (w *TaskWait) Withdraw() (items []*store.WorkItem, pending bool) {
	if w == nil {
		return nil, false
	}
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	switch w.state {
	case waitOffered:
		w.h.remove(w)
		w.state = waitIdle
	case waitTaken:
		return nil, true
	}
	items, w.items = w.items, nil
	return items, false
}

// Leave ends the place as its poll returns, and returns the tasks
// delivered that the poll has not read: it must answer with them, or hand
// them back. A place taken and not delivered yet leaves its tasks to the
// delivery, which hands them back.
func (w *TaskWait) Leave() []*store.WorkItem {
	if w == nil {
		return nil
	}
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	switch w.state {
	case waitOffered:
		w.h.remove(w)
	case waitTaken:
		w.state = waitGone
		return nil
	}
	w.state = waitGone
	items := w.items
	w.items = nil
	return items
}

// Take takes the place that has waited longest for a tenant's task queue,
// or returns nil when none waits. The taker must Deliver to it, once,
// whatever becomes of its ack.
func (h *Handoff) Take(tenant, queue string) *TaskWait {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := handoffKey{tenant, queue}
	waits := h.waiting[k]
	if len(waits) == 0 {
		return nil
	}
	w := waits[0]
	h.remove(w)
	w.state = waitTaken
	return w
}

// Quiet says that the poll may skip its first query: a query found the
// queue empty within the Handoff's quiet, and no task came since without
// a place.
func (w *TaskWait) Quiet() bool {
	if w == nil || w.h.quiet <= 0 {
		return false
	}
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	n := w.h.news[w.key]
	return n != nil && !n.emptyAt.IsZero() && time.Since(n.emptyAt) < w.h.quiet
}

// BeforeQuery notes the queue's news as the poll's query begins.
func (w *TaskWait) BeforeQuery() {
	if w == nil || w.h.quiet <= 0 {
		return
	}
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	w.epoch = w.h.epoch
	w.unplaced = 0
	if n := w.h.news[w.key]; n != nil {
		w.unplaced = n.unplaced
	}
}

// QueriedEmpty records that the poll's query found the queue empty (it
// leased fewer tasks than it asked for), unless a task came without a
// place since the query began: that task's commit may have come after the
// query's snapshot.
func (w *TaskWait) QueriedEmpty() {
	if w == nil || w.h.quiet <= 0 {
		return
	}
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.newsOf(w.key)
	if w.epoch == h.epoch && n.unplaced == w.unplaced {
		n.emptyAt = time.Now()
	}
}

// Token is the lease token of the tasks handed to the place.
func (w *TaskWait) Token() string { return w.token }

// Lease is how long the tasks handed to the place are leased.
func (w *TaskWait) Lease() time.Duration { return w.lease }

// Max is the most tasks one delivery may hold.
func (w *TaskWait) Max() int { return w.max }

// Deliver hands the place its tasks: those its taker's ack inserted leased
// to it, none when the ack did not commit them. It returns the tasks when
// the poll has left: the caller hands them back.
func (w *TaskWait) Deliver(items []*store.WorkItem) (unwanted []*store.WorkItem) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	if w.state == waitGone {
		return items
	}
	w.state = waitIdle
	w.items = append(w.items, items...)
	select {
	case w.done <- struct{}{}:
	default:
	}
	return nil
}

// remove takes w out of the waiting places. h.mu is held.
func (h *Handoff) remove(w *TaskWait) {
	waits := h.waiting[w.key]
	for i, o := range waits {
		if o == w {
			waits = append(waits[:i:i], waits[i+1:]...)
			break
		}
	}
	if len(waits) == 0 {
		delete(h.waiting, w.key)
	} else {
		h.waiting[w.key] = waits
	}
}

// Waiting is the number of places offered, for tests and metrics.
func (h *Handoff) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, waits := range h.waiting {
		n += len(waits)
	}
	return n
}
