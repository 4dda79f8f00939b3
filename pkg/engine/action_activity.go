package engine

import "fmt"

// activity schedules attempt of the step's activity (or finds it scheduled
// in the history) and completes done with its result, after the retries the
// step's policy allows.
func (t *turn) activity(s *Step, f *frame, attempt int, done continuation) {
	a := s.Activity
	var id int64
	if h, ok := t.peek().(ActivityScheduled); ok && h.Name == a.Name && h.TaskQueue == a.TaskQueue && h.Attempt == attempt {
		// Replaying: the history already holds the input, no need to evaluate it.
		t.seq++
		id = h.ID
	} else {
		v, ok := t.render(&a.Input, f)
		if !ok {
			return
		}
		input, err := encodeJSON(v)
		if err != nil {
			t.failWith(Failure{Kind: "expression", Message: a.Input.t.path + ": " + err.Error()})
			return
		}
		e, ok := t.record(ActivityScheduled{Name: a.Name, TaskQueue: a.TaskQueue, Input: input, Attempt: attempt})
		if !ok {
			return
		}
		id = e.EventID()
	}
	w := &activityWait{pending: pending{frame: f, name: a.Name}, t: t, s: s, attempt: attempt, done: done}
	w.pending.resume = w
	p := &w.pending
	t.activities[id] = p
	if a.Timeout != nil {
		d, ok := t.renderDuration(a.Timeout, f)
		if !ok {
			return
		}
		p.timeout, _ = t.timer(d, "timeout", f, func() {
			if t.activities[id] == nil {
				return
			}
			delete(t.activities, id)
			if _, ok := t.record(ActivityCancelRequested{ScheduledID: id, Reason: "timeout"}); ok {
				t.retryOrFail(s, f, attempt, Failure{Kind: "timeout", Message: fmt.Sprintf("attempt timed out after %s", d)}, done)
			}
		})
	}
}

// activityWait is an outstanding activity attempt; it receives the attempt's result.
type activityWait struct {
	pending
	t       *turn
	s       *Step
	attempt int
	done    continuation
}

func (w *activityWait) resume(r result) {
	w.t.forgetTimer(w.timeout)
	if r.err != nil {
		w.t.retryOrFail(w.s, w.frame, w.attempt, *r.err, w.done)
		return
	}
	w.done.resume(r)
}

// retryOrFail handles a failed attempt: a retry timer, then the next attempt, while the
// policy allows; otherwise the step fails.
func (t *turn) retryOrFail(s *Step, f *frame, attempt int, fail Failure, done continuation) {
	a := s.Activity
	if attempt < a.Retry.MaxAttempts && !fail.NonRetryable {
		t.timer(a.Retry.delay(attempt), "retry", f, func() { t.activity(s, f, attempt+1, done) })
		return
	}
	kind := fail.Kind
	if kind == "" {
		kind = "activity_failed"
	}
	done.resume(result{err: &Failure{Kind: kind, Message: fmt.Sprintf("activity %s failed (attempt %d of %d): %s", a.Name, attempt, a.Retry.MaxAttempts, fail.Message)}})
}
