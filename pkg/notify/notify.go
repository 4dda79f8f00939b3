// Package notify carries hints that work is waiting, so that whoever waits
// for it looks now instead of at its next poll: a long poll of a task
// queue when an activity is scheduled, a dispatcher when messages are
// queued for an instance, a WaitForCompletion when its instance ends.
//
// A hint is only a hint. Correctness stays with the database: a waiter
// that misses a hint finds the work at its next poll, a hint for work that
// is gone costs one empty query. So a Notifier never blocks, never fails,
// and may drop hints; nothing may wait for a hint without a poll interval
// behind it.
//
// Off carries nothing. Local (the commands' default) is the in-process
// notifier (orchard dev, or an API and a dispatcher in one process).
// Postgres carries hints across processes with LISTEN/NOTIFY, for
// PostgreSQL only; Members, with Connect calls between the processes,
// which register in the database, for any database (CockroachDB has no
// LISTEN/NOTIFY). The package README says how each works and what it costs.
package notify

import (
	"context"
	"slices"
	"sync"
)

// Kind is what a hint says is waiting.
type Kind uint8

const (
	// Orchestrations: messages are queued for an instance of the tenant (a
	// start, an activity's result, an event, a child's result). Waited
	// for by dispatchers.
	Orchestrations Kind = iota + 1
	// Tasks: an activity task is queued in a task queue (Key) of the
	// tenant. Waited for by PollActivityTask.
	Tasks
	// Ended: an instance (Key) of the tenant ended. Waited for by
	// WaitForCompletion.
	Ended
)

// Topic is what a hint is about. A subscription with an empty TenantID
// and Key hears every tenant's hints of its kind.
type Topic struct {
	Kind     Kind
	TenantID string
	Key      string
}

// wildcard is the topic of every tenant's hints of t's kind.
func (t Topic) wildcard() Topic { return Topic{Kind: t.Kind} }

// Notifier delivers hints to subscribers.
type Notifier interface {
	// Notify sends a hint for each topic; a topic given n times wakes up
	// to n subscribers (n tasks were queued). It never blocks on a
	// subscriber and never fails.
	Notify(ctx context.Context, topics ...Topic)
	// Subscribe starts listening to a topic. Close the subscription when
	// done waiting.
	Subscribe(t Topic) *Subscription
}

// Subscription receives a topic's hints on C: one value stands for any
// number of hints since the last receive.
type Subscription struct {
	C     <-chan struct{}
	c     chan struct{}
	topic Topic
	hub   *Local
}

// Close stops the subscription. A hint it received but did not consume
// (its waiter found the work on its own, or gave up) passes to another
// subscriber of the topic, so that it is not lost.
func (s *Subscription) Close() {
	if s == nil || s.hub == nil {
		return
	}
	s.hub.unsubscribe(s)
}

// Off carries no hints: every waiter finds its work by polling. It is the
// default, until hints are shown not to cost throughput (see the README).
type Off struct{}

// Notify does nothing.
func (Off) Notify(context.Context, ...Topic) {}

// Subscribe returns a subscription that never hears anything.
func (Off) Subscribe(Topic) *Subscription { return &Subscription{} }

// Local is the in-process Notifier. Tasks and Orchestrations hints each
// wake one idle subscriber (one task is taken by one poller); Ended hints
// wake every subscriber of the instance. The zero value is not usable:
// NewLocal.
type Local struct {
	mu   sync.Mutex
	subs map[Topic][]*Subscription
	// next rotates the one-subscriber deliveries over a topic's subscribers.
	next map[Topic]int
}

// NewLocal returns an in-process notifier.
func NewLocal() *Local {
	return &Local{subs: map[Topic][]*Subscription{}, next: map[Topic]int{}}
}

// Subscribe listens to a topic in this process.
func (l *Local) Subscribe(t Topic) *Subscription {
	c := make(chan struct{}, 1)
	s := &Subscription{C: c, c: c, topic: t, hub: l}
	l.mu.Lock()
	l.subs[t] = append(l.subs[t], s)
	l.mu.Unlock()
	return s
}

func (l *Local) unsubscribe(s *Subscription) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if removeFrom(l.subs, s.topic, s) {
		delete(l.next, s.topic)
	}
	select {
	case <-s.c:
		if s.topic.Kind != Ended {
			_ = l.deliverLocked(s.topic, 1)
		}
	default:
	}
}

// Notify delivers hints to this process's subscribers.
func (l *Local) Notify(_ context.Context, topics ...Topic) { l.deliver(topics) }

// deliver delivers hints to this process's subscribers, and returns those
// that woke none of them, which other processes' waiters may want: a hint
// of an Ended topic always (it wakes every waiter of the instance), and of
// the other kinds each one that found no idle subscriber of its topic.
func (l *Local) deliver(topics []Topic) (unheard []Topic) {
	if len(topics) == 0 {
		return nil
	}
	counts := make(map[Topic]int, len(topics))
	for _, t := range topics {
		counts[t]++
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for t, n := range counts {
		left := l.deliverLocked(t, n)
		if t.TenantID != "" || t.Key != "" {
			left = min(left, l.deliverLocked(t.wildcard(), n))
		}
		if t.Kind == Ended {
			left = n
		}
		for range left {
			unheard = append(unheard, t)
		}
	}
	return unheard
}

// deliverLocked wakes n idle subscribers of t (every one, for Ended), and
// returns how many of the n it found none for.
func (l *Local) deliverLocked(t Topic, n int) int {
	subs := l.subs[t]
	if len(subs) == 0 {
		return n
	}
	want := n
	if t.Kind == Ended {
		want = len(subs)
	}
	start := l.next[t]
	for i := 0; i < len(subs) && want > 0; i++ {
		s := subs[(start+i)%len(subs)]
		select {
		case s.c <- struct{}{}:
			want--
			n--
		default: // already woken: it will look anyway
		}
	}
	l.next[t] = (start + 1) % len(subs)
	return max(n, 0)
}

// Subscribers is the number of subscriptions open, for tests and metrics.
func (l *Local) Subscribers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, subs := range l.subs {
		n += len(subs)
	}
	return n
}

// maxBatch bounds the hints sent to other processes at once (one
// statement, one call).
const maxBatch = 512

// nextBatch waits for a hint on out, then takes what else is queued there,
// up to maxBatch; ok is false once ctx ends.
func nextBatch(ctx context.Context, out <-chan Topic) (batch []Topic, ok bool) {
	select {
	case t := <-out:
		batch = append(batch, t)
	case <-ctx.Done():
		return nil, false
	}
	for len(batch) < maxBatch {
		select {
		case t := <-out:
			batch = append(batch, t)
		default:
			return batch, true
		}
	}
	return batch, true
}

// counted is a topic and how many waiters its hints may wake.
type counted struct {
	Topic
	n int
}

// fold makes a batch one entry per topic, in the order first seen: a
// Tasks topic with the count of its repeats (each task wakes a poll), any
// other with 1 (one hint wakes what it wakes).
func fold(batch []Topic) []counted {
	at := make(map[Topic]int, len(batch))
	var out []counted
	for _, t := range batch {
		i, seen := at[t]
		switch {
		case !seen:
			at[t] = len(out)
			out = append(out, counted{t, 1})
		case t.Kind == Tasks:
			out[i].n++
		}
	}
	return out
}

// removeFrom takes v out of the values of k in m (into a new slice: the
// old one may still be read), and k out of m when none is left, which it
// reports.
func removeFrom[K, V comparable](m map[K][]V, k K, v V) (emptied bool) {
	vs := m[k]
	if i := slices.Index(vs, v); i >= 0 {
		vs = append(vs[:i:i], vs[i+1:]...)
	}
	if len(vs) == 0 {
		delete(m, k)
		return true
	}
	m[k] = vs
	return false
}
