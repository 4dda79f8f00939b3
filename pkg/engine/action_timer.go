package engine

import "time"

// forgetTimer drops a pending timer that no longer matters: its wait ended
// another way (the activity answered, the event came) or its frame was
// cancelled (a race lost). Dropped past the history, in this turn, its
// message is still queued; the decision withdraws it.
func (t *turn) forgetTimer(id int64) {
	if _, ok := t.timers[id]; !ok {
		return
	}
	delete(t.timers, id)
	if t.seq > int64(len(t.in.History)) {
		t.forgotten = append(t.forgotten, id)
	}
}

// timer records a durable timer and calls fire when it fires (unless f was cancelled).
func (t *turn) timer(d time.Duration, purpose string, f *frame, fire func()) (int64, bool) {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	e, ok := t.record(TimerCreated{FireAt: t.in.Now.UnixMilli() + int64(ms), Purpose: purpose})
	if !ok {
		return 0, false
	}
	if t.timers == nil {
		t.timers = map[int64]*pending{}
	}
	t.timers[e.EventID()] = &pending{frame: f, resume: fireFunc(fire)}
	return e.EventID(), true
}

// timerStep waits for the duration v renders to, then completes done.
func (t *turn) timerStep(v *Value, f *frame, done continuation) {
	if d, ok := t.renderDuration(v, f); ok {
		t.timer(d, "timer", f, func() { done.resume(result{}) })
	}
}
