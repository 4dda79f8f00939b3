package api

import (
	"sync"
	"time"

	"github.com/orchardhq/orchard/pkg/notify"
)

// endWatches keep, for a while, a subscription to the end of each instance
// this server started, taken before the start was written: until it has
// heard a hint, the instance has not ended (as far as hints tell), so the
// WaitForCompletion that usually follows its start takes the subscription
// and reads the instance only on the hint of its end (or after a poll
// interval, for a lost hint), not also as it starts. Only for servers whose
// dispatchers' hints reach them (Config.Hinted).
type endWatches struct {
	notifier notify.Notifier
	// ttl is how long a watch waits for its WaitForCompletion; max bounds
	// the watches kept (past it, a start keeps none).
	ttl time.Duration
	max int

	mu     sync.Mutex
	byKey  map[endKey]*notify.Subscription
	queue  []endWatch // by age, for expiry; some already taken
	closed bool
}

type endKey struct{ tenant, instance string }

type endWatch struct {
	key endKey
	sub *notify.Subscription
	at  time.Time
}

// Bounds of the end watches: a WaitForCompletion comes right after its
// start's answer, and a subscription costs a few hundred bytes.
const (
	endWatchTTL = 10 * time.Second
	maxEndWatch = 1 << 14
)

func newEndWatches(n notify.Notifier, ttl time.Duration, max int) *endWatches {
	return &endWatches{notifier: n, ttl: ttl, max: max, byKey: map[endKey]*notify.Subscription{}}
}

// watch subscribes to the end of an instance about to be started; nil when
// the server keeps none. Give the result to keep or drop.
func (w *endWatches) watch(tenant, instance string) *notify.Subscription {
	if w == nil {
		return nil
	}
	return w.notifier.Subscribe(notify.Topic{Kind: notify.Ended, TenantID: tenant, Key: instance})
}

// keep files the subscription of an instance that the start created, for
// its WaitForCompletion to take.
func (w *endWatches) keep(tenant, instance string, sub *notify.Subscription) {
	if sub == nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	stale := w.expireLocked(now)
	if w.closed || len(w.byKey) >= w.max {
		stale = append(stale, sub)
	} else {
		k := endKey{tenant, instance}
		if old := w.byKey[k]; old != nil {
			stale = append(stale, old)
		}
		w.byKey[k] = sub
		w.queue = append(w.queue, endWatch{key: k, sub: sub, at: now})
	}
	w.mu.Unlock()
	for _, s := range stale {
		s.Close()
	}
}

// drop closes the subscription of a start that created no instance.
func (w *endWatches) drop(sub *notify.Subscription) { sub.Close() }

// take returns the instance's kept subscription, nil when there is none
// (another server started it, a wait took it, or it expired). The caller
// closes it.
func (w *endWatches) take(tenant, instance string) *notify.Subscription {
	if w == nil {
		return nil
	}
	k := endKey{tenant, instance}
	w.mu.Lock()
	defer w.mu.Unlock()
	sub := w.byKey[k]
	delete(w.byKey, k)
	return sub
}

// expireLocked removes the watches older than the TTL and returns those
// not taken, to close.
func (w *endWatches) expireLocked(now time.Time) (stale []*notify.Subscription) {
	i := 0
	for ; i < len(w.queue) && now.Sub(w.queue[i].at) >= w.ttl; i++ {
		e := w.queue[i]
		if w.byKey[e.key] == e.sub {
			delete(w.byKey, e.key)
			stale = append(stale, e.sub)
		}
	}
	w.queue = w.queue[i:]
	return stale
}

// stop closes every kept subscription; starts keep none afterwards.
func (w *endWatches) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	subs := make([]*notify.Subscription, 0, len(w.byKey))
	for _, s := range w.byKey {
		subs = append(subs, s)
	}
	w.byKey, w.queue, w.closed = map[endKey]*notify.Subscription{}, nil, true
	w.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
}

// len is the number of watches kept.
func (w *endWatches) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byKey)
}
