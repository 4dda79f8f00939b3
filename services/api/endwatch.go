package api

import (
	"sync"
	"time"

	"github.com/orchardhq/orchard/pkg/notify"
)

// endWatches keep, for a while, a watch of the end of each instance this
// server started, taken before the start was written: until it has heard
// a hint, the instance has not ended (as far as hints tell), so the
// WaitForCompletion that usually follows its start takes the watch and
// reads the instance only on the hint of its end (or after a poll
// interval, for a lost hint), not also as it starts; and not even then
// when the dispatcher of this process handed it the instance as its end
// left it. Only for servers whose dispatchers' hints reach them
// (Config.Hinted).
type endWatches struct {
	notifier notify.Notifier
	handoff  *notify.Handoff
	// ttl is how long a watch waits for its WaitForCompletion; max bounds
	// the watches kept (past it, a start keeps none).
	ttl time.Duration
	max int

	mu     sync.Mutex
	byKey  map[endKey]*endWatch
	queue  []keptWatch // some already taken
	closed bool
}

type endKey struct{ tenant, instance string }

// endWatch watches the end of one instance: the hint of its end, and the
// instance as its end left it when this process's dispatcher ended it
// (nil without a Handoff).
type endWatch struct {
	sub *notify.Subscription
	end *notify.EndWait
}

func watchEnd(n notify.Notifier, h *notify.Handoff, tenant, instance string) *endWatch {
	return &endWatch{sub: n.Subscribe(notify.Topic{Kind: notify.Ended, TenantID: tenant, Key: instance}),
		end: h.AwaitEnd(tenant, instance)}
}

// close ends the watch.
func (w *endWatch) close() {
	w.sub.Close()
	w.end.Leave()
}

// keptWatch is a kept watch, by age.
type keptWatch struct {
	key   endKey
	watch *endWatch
	at    time.Time
}

// Bounds of the end watches: a WaitForCompletion comes right after its
// start's answer, and a subscription costs a few hundred bytes.
const (
	endWatchTTL = 10 * time.Second
	maxEndWatch = 1 << 14
)

func newEndWatches(n notify.Notifier, h *notify.Handoff, ttl time.Duration, max int) *endWatches {
	return &endWatches{notifier: n, handoff: h, ttl: ttl, max: max, byKey: map[endKey]*endWatch{}}
}

// watch watches the end of an instance about to be started; nil when the
// server keeps none. Give the result to keep or drop.
func (w *endWatches) watch(tenant, instance string) *endWatch {
	if w == nil {
		return nil
	}
	return watchEnd(w.notifier, w.handoff, tenant, instance)
}

// keep files the watch of an instance that the start created, for its
// WaitForCompletion to take.
func (w *endWatches) keep(tenant, instance string, watch *endWatch) {
	if watch == nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	stale := w.expireLocked(now)
	if w.closed || len(w.byKey) >= w.max {
		stale = append(stale, watch)
	} else {
		k := endKey{tenant, instance}
		if old := w.byKey[k]; old != nil {
			stale = append(stale, old)
		}
		w.byKey[k] = watch
		w.queue = append(w.queue, keptWatch{key: k, watch: watch, at: now})
	}
	w.mu.Unlock()
	for _, s := range stale {
		s.close()
	}
}

// drop closes the watch of a start that created no instance.
func (w *endWatches) drop(watch *endWatch) {
	if watch != nil {
		watch.close()
	}
}

// take returns the instance's kept watch, nil when there is none (another
// server started it, a wait took it, or it expired). The caller closes
// it.
func (w *endWatches) take(tenant, instance string) *endWatch {
	if w == nil {
		return nil
	}
	k := endKey{tenant, instance}
	w.mu.Lock()
	defer w.mu.Unlock()
	watch := w.byKey[k]
	delete(w.byKey, k)
	return watch
}

// expireLocked removes the watches older than the TTL and returns those
// not taken, to close.
func (w *endWatches) expireLocked(now time.Time) (stale []*endWatch) {
	i := 0
	for ; i < len(w.queue) && now.Sub(w.queue[i].at) >= w.ttl; i++ {
		e := w.queue[i]
		if w.byKey[e.key] == e.watch {
			delete(w.byKey, e.key)
			stale = append(stale, e.watch)
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
	watches := make([]*endWatch, 0, len(w.byKey))
	for _, s := range w.byKey {
		watches = append(watches, s)
	}
	w.byKey, w.queue, w.closed = map[endKey]*endWatch{}, nil, true
	w.mu.Unlock()
	for _, s := range watches {
		s.close()
	}
}

// len is the number of watches kept.
func (w *endWatches) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byKey)
}
