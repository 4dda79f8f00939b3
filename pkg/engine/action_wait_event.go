package engine

import (
	"fmt"
	"slices"
)

func (t *turn) waitEvent(s *Step, f *frame, done continuation) {
	w := s.WaitEvent
	q := t.queue(w.Name)
	if len(q.buffered) > 0 {
		payload := q.buffered[0]
		q.buffered = q.buffered[1:]
		done.resume(result{out: payload})
		return
	}
	p := &pending{frame: f}
	p.resume = resumeFunc(func(r result) {
		t.forgetTimer(p.timeout)
		done.resume(r)
	})
	q.waiters = append(q.waiters, p)
	if w.Timeout != nil {
		d, ok := t.renderDuration(w.Timeout, f)
		if !ok {
			return
		}
		p.timeout, _ = t.timer(d, "event_timeout", f, func() {
			q.waiters = slices.DeleteFunc(q.waiters, func(o *pending) bool { return o == p })
			done.resume(result{err: &Failure{Kind: "timeout", Message: fmt.Sprintf("no event %q within %s", w.Name, d)}})
		})
	}
}
