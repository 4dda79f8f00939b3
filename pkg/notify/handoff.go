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
//
// Eager start and completion (Temporal's "eager workflow start") use an
// idle dispatcher loop's place: the loop offers it (Idle), with its
// dispatcher's turns (Hold), and an API call whose write makes an instance
// due (a start, a task's completion) takes it, leases the instance in its
// own transaction and runs the turn there, in the loop's place
// (store.EagerLease): the write and the turn's ack commit together, with
// no claim and no hint. It then gives the place back (Return), and the
// loop never woke. A write that ran no turn (it leased nothing, or failed)
// delivers an empty delivery instead, and the loop fetches.
//
// A start that finds no idle loop still runs its first turn before its
// write, in a dispatcher of this process that serves its tenant (Holds,
// Holder; store.StartOrchestrationParams.First): the batched start then
// creates the instance as the turn's ack leaves it, when the turn is one
// it can write (it schedules tasks and timers, and ends nothing), and no
// loop claims the instance for that turn.
//
// A Handoff also carries an instance's end, as the ack that ended it left
// it, to the WaitForCompletion calls waiting for it (AwaitEnd, in ends.go).
type Handoff struct {
	tasks places[*store.WorkItem]
	loops places[*store.OrchestrationItem]
	ends  ends

	mu    sync.Mutex // guards news, epoch and holders
	quiet time.Duration
	// holders are the dispatchers that run starts' first turns (Holds),
	// by the tenant they serve ("" for every tenant).
	holders map[string]*holder
	news    map[handoffKey]*queueNews
	// epoch counts the times news was cleared, so that a query's finding
	// is not recorded over news it did not see.
	epoch uint64
}

// handoffKey names what a place waits for: a tenant's task queue, or a
// tenant's instances (queue empty; tenant empty for a loop of every
// tenant).
type handoffKey struct{ tenant, queue string }

// places are the places offered for one kind of hand-over, by key.
type places[T any] struct {
	mu      sync.Mutex
	waiting map[handoffKey][]*Place[T]
}

// holder is a dispatcher that runs the first turns of starts (Holds).
type holder struct {
	lease time.Duration
	hold  func() store.HeldTurn
	// running holds a value for each first turn given and not released.
	running chan struct{}
}

// maxFirstTurns bounds the first turns a dispatcher holds at once, which
// run in the API calls' goroutines, where its loops bound their own: a
// start past it goes without (its instance waits for a claim).
const maxFirstTurns = 64

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
	return &Handoff{tasks: places[*store.WorkItem]{waiting: map[handoffKey][]*Place[*store.WorkItem]{}},
		loops: places[*store.OrchestrationItem]{waiting: map[handoffKey][]*Place[*store.OrchestrationItem]{}},
		ends:  ends{max: maxEndBytes}, quiet: quiet, news: map[handoffKey]*queueNews{}, holders: map[string]*holder{}}
}

// Holds makes a dispatcher of this process, of a tenant's instances (every
// tenant's when empty), the one that runs the first turns of the tenant's
// starts that find no idle loop (Holder), with hold, their items leased
// for lease; release ends that, unless another dispatcher took its place.
func (h *Handoff) Holds(tenant string, lease time.Duration, hold func() store.HeldTurn) (release func()) {
	if h == nil {
		return func() {}
	}
	o := &holder{lease: lease, hold: hold, running: make(chan struct{}, maxFirstTurns)}
	h.mu.Lock()
	h.holders[tenant] = o
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.holders[tenant] == o {
			delete(h.holders, tenant)
		}
	}
}

// Holder returns a turn for the first turn of a tenant's start, run before
// the start's write, by the dispatcher of this process that serves the
// tenant (Holds), and the lease its item names; nil when none does, or
// when it holds maxFirstTurns already. The caller releases it once the
// start returned.
func (h *Handoff) Holder(tenant string) (hold store.HeldTurn, lease time.Duration, release func()) {
	if h == nil {
		return nil, 0, nil
	}
	h.mu.Lock()
	o := h.holders[tenant]
	if o == nil {
		o = h.holders[""]
	}
	h.mu.Unlock()
	if o == nil {
		return nil, 0, nil
	}
	select {
	case o.running <- struct{}{}:
	default:
		return nil, 0, nil
	}
	return o.hold(), o.lease, func() { <-o.running }
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
	waitIdle    waitState = iota // not offered: its waiter looks on its own, or has what came
	waitOffered                  // offered: a taker may take it
	waitTaken                    // a taker took it: its delivery comes
	waitGone                     // its waiter left while it was taken
)

// Place is a waiter's place in a Handoff, where a taker hands it items of
// T leased to it (the place's token and lease) after the taker's commit.
// A nil Place is never offered and never delivers.
type Place[T any] struct {
	p     *places[T]
	key   handoffKey
	token string
	lease time.Duration
	max   int
	// hold, for a loop's place, returns a turn to run in its taker's
	// write (Hold).
	hold func() store.HeldTurn
	// Guarded by p.mu.
	state waitState
	items []T
	// done holds a value once a delivery came (of items, or of nothing).
	done chan struct{}
}

// TaskWait is a poll's place, for one task queue of one tenant. A TaskWait
// of no Handoff is never offered and never delivers.
type TaskWait struct {
	*Place[*store.WorkItem]
	h *Handoff
	// epoch and unplaced are the queue's news as the poll's last query
	// began (BeforeQuery).
	epoch, unplaced uint64
}

// LoopPlace is an idle dispatcher loop's place, for the instances of one
// tenant (or of every tenant).
type LoopPlace = Place[*store.OrchestrationItem]

// Wait returns a poll's place for a tenant's task queue: tasks handed to
// it are leased for lease with a token of its own, up to most in one
// delivery. It is offered only by Offer.
func (h *Handoff) Wait(tenant, queue string, lease time.Duration, most int) *TaskWait {
	if h == nil {
		return &TaskWait{}
	}
	return &TaskWait{Place: h.tasks.place(handoffKey{tenant, queue}, lease, most), h: h}
}

// Idle returns an idle dispatcher loop's place for a tenant's instances
// (every tenant's when empty): an instance handed to it is leased for
// lease with a token of its own. It is offered only by Offer. hold, when
// set, lets its taker run the instance's turn itself, in its write (Hold).
// A nil Handoff returns nil.
func (h *Handoff) Idle(tenant string, lease time.Duration, hold func() store.HeldTurn) *LoopPlace {
	if h == nil {
		return nil
	}
	w := h.loops.place(handoffKey{tenant: tenant}, lease, 1)
	w.hold = hold
	return w
}

// Hold returns a turn that the taker of a loop's place runs inside its
// own write, in the place of the loop (store.EagerLease); nil when the
// loop offers none. A taker that ran it gives the place back with Return:
// the loop goes on waiting.
func (w *Place[T]) Hold() store.HeldTurn {
	if w == nil || w.hold == nil {
		return nil
	}
	return w.hold()
}

// Return gives a taken place back undelivered, offered again: its taker
// did the work itself (Hold). A place whose waiter left stays gone.
func (w *Place[T]) Return() {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.state == waitTaken {
		w.offer()
	}
}

// offer puts the place among the waiting ones. w.p.mu is held.
func (w *Place[T]) offer() {
	w.state = waitOffered
	w.p.waiting[w.key] = append(w.p.waiting[w.key], w)
}

func (ps *places[T]) place(k handoffKey, lease time.Duration, most int) *Place[T] {
	return &Place[T]{p: ps, key: k, token: uuid.NewString(), lease: lease, max: max(most, 1), done: make(chan struct{}, 1)}
}

// Done receives a value when a delivery came (nil for a nil Place, which
// blocks forever in a select).
func (w *Place[T]) Done() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.done
}

// Offer puts the place where a taker may take it; its waiter then waits
// for Done, beside its hint and its poll interval. It does nothing unless
// the place is idle.
func (w *Place[T]) Offer() {
	if w == nil {
		return
	}
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.state == waitIdle {
		w.offer()
	}
}

// Withdraw takes the place back before its waiter looks on its own. It
// returns the items delivered to it; pending is true when a taker took it
// and has not delivered yet: the waiter then waits for Done instead of
// looking.
func (w *Place[T]) Withdraw() (items []T, pending bool) {
	if w == nil {
		return nil, false
	}
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	switch w.state {
	case waitOffered:
		w.p.remove(w)
		w.state = waitIdle
	case waitTaken:
		return nil, true
	}
	items, w.items = w.items, nil
	return items, false
}

// Leave ends the place as its waiter goes, and returns the items
// delivered that it has not read: it must use them, or hand them back. A
// place taken and not delivered yet leaves its items to the delivery,
// which hands them back.
func (w *Place[T]) Leave() []T {
	if w == nil {
		return nil
	}
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	switch w.state {
	case waitOffered:
		w.p.remove(w)
	case waitTaken:
		w.state = waitGone
		return nil
	}
	w.state = waitGone
	items := w.items
	w.items = nil
	return items
}

// Take takes the place of the poll that has waited longest for a
// tenant's task queue, or returns nil when none waits. The taker must
// Deliver to it, once, whatever becomes of its write.
func (h *Handoff) Take(tenant, queue string) *Place[*store.WorkItem] {
	if h == nil {
		return nil
	}
	return h.tasks.take(handoffKey{tenant, queue})
}

// TakeIdle takes the place of the loop that has waited longest for the
// tenant's instances, else for every tenant's, or returns nil when none
// waits. The taker must Deliver to it, once, whatever becomes of its
// write.
func (h *Handoff) TakeIdle(tenant string) *LoopPlace {
	if h == nil {
		return nil
	}
	if w := h.loops.take(handoffKey{tenant: tenant}); w != nil || tenant == "" {
		return w
	}
	return h.loops.take(handoffKey{})
}

func (ps *places[T]) take(k handoffKey) *Place[T] {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	waits := ps.waiting[k]
	if len(waits) == 0 {
		return nil
	}
	w := waits[0]
	ps.remove(w)
	w.state = waitTaken
	return w
}

// Quiet says that the poll may skip its first query: a query found the
// queue empty within the Handoff's quiet, and no task came since without
// a place.
func (w *TaskWait) Quiet() bool {
	if w.h == nil || w.h.quiet <= 0 {
		return false
	}
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	n := w.h.news[w.key]
	return n != nil && !n.emptyAt.IsZero() && time.Since(n.emptyAt) < w.h.quiet
}

// BeforeQuery notes the queue's news as the poll's query begins.
func (w *TaskWait) BeforeQuery() {
	if w.h == nil || w.h.quiet <= 0 {
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
	if w.h == nil || w.h.quiet <= 0 {
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

// Token is the lease token of what is handed to the place.
func (w *Place[T]) Token() string { return w.token }

// Lease is how long what is handed to the place is leased.
func (w *Place[T]) Lease() time.Duration { return w.lease }

// Max is the most items one delivery may hold.
func (w *Place[T]) Max() int { return w.max }

// Deliver hands the place its items: those its taker's write leased to
// it, none when the write did not commit them. It returns the items when
// the waiter has left: the caller hands them back.
func (w *Place[T]) Deliver(items []T) (unwanted []T) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
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

// remove takes w out of the waiting places. ps.mu is held.
func (ps *places[T]) remove(w *Place[T]) { removeFrom(ps.waiting, w.key, w) }

// Waiting is the number of poll places offered, for tests and metrics.
func (h *Handoff) Waiting() int { return h.tasks.count() }

// IdleLoops is the number of loop places offered, for tests and metrics.
func (h *Handoff) IdleLoops() int { return h.loops.count() }

// EndWaits is the number of waits for an end, and the bytes of the
// instances handed to them, for tests.
func (h *Handoff) EndWaits() (waits, bytes int) {
	h.ends.mu.Lock()
	defer h.ends.mu.Unlock()
	for _, ws := range h.ends.waits {
		waits += len(ws)
	}
	return waits, h.ends.bytes
}

func (ps *places[T]) count() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for _, waits := range ps.waiting {
		n += len(waits)
	}
	return n
}
