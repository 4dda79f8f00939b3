package notify

import (
	"sync"

	"github.com/orchardhq/orchard/pkg/store"
)

// The ends of a Handoff carry an instance that ended, as the ack of its
// last turn left it, from the dispatcher's ack to the WaitForCompletion
// calls of the same process that wait for it (AwaitEnd): they answer
// with it, without reading the instance again. Like any hand-over it is
// only a chance: a wait that got nothing reads.
type ends struct {
	mu    sync.Mutex
	waits map[handoffKey][]*EndWait
	// bytes is the size of the instances the waits hold, at most max:
	// past it, an end is not handed over (its waits read).
	bytes, max int
}

// maxEndBytes bounds the instances held for the waits of a Handoff: an
// instance carries its input and output, and a start's wait is kept for a
// while whether or not its WaitForCompletion comes.
const maxEndBytes = 64 << 20

// EndWait is a wait for the end of one instance. A nil EndWait gets
// nothing.
type EndWait struct {
	h   *Handoff
	key handoffKey
	// Guarded by h.ends.mu.
	in   *store.Instance
	size int
	gone bool
}

// AwaitEnd returns a wait for the end of a tenant's instance: an end
// handed over after it (Ended) is kept in it until Leave. Nil for a nil
// Handoff.
func (h *Handoff) AwaitEnd(tenant, instance string) *EndWait {
	if h == nil {
		return nil
	}
	w := &EndWait{h: h, key: handoffKey{tenant, instance}}
	e := &h.ends
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.waits == nil {
		e.waits = map[handoffKey][]*EndWait{}
	}
	e.waits[w.key] = append(e.waits[w.key], w)
	return w
}

// Ended hands an instance that ended to the waits for it, as the ack that
// ended it left it (store.AckOrchestrationItemParams.AckedInstance). Call
// it after the ack's commit, before the instance's Ended hint.
func (h *Handoff) Ended(in *store.Instance) {
	if h == nil {
		return
	}
	size := len(in.Input) + len(in.Output) + len(in.Error)
	for k, v := range in.Tags {
		size += len(k) + len(v)
	}
	e := &h.ends
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range e.waits[handoffKey{in.TenantID, in.InstanceID}] {
		if w.in != nil || e.bytes+size > e.max {
			continue
		}
		w.in, w.size = in, size
		e.bytes += size
	}
}

// Instance returns the instance handed over to the wait, nil when none
// was.
func (w *EndWait) Instance() *store.Instance {
	if w == nil {
		return nil
	}
	w.h.ends.mu.Lock()
	defer w.h.ends.mu.Unlock()
	return w.in
}

// Leave ends the wait; it gets nothing more.
func (w *EndWait) Leave() {
	if w == nil {
		return
	}
	e := &w.h.ends
	e.mu.Lock()
	defer e.mu.Unlock()
	if w.gone {
		return
	}
	w.gone = true
	e.bytes -= w.size
	removeFrom(e.waits, w.key, w)
}
