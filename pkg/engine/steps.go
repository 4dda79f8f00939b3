package engine

import (
	"fmt"
)

// runSteps runs steps in order in frame f and passes the last step's result to k.
func (t *turn) runSteps(steps []Step, f *frame, k continuation) {
	q := &sequence{t: t, steps: steps, f: f, k: k}
	q.resume(result{})
}

// sequence runs a list of steps one after the other. As a continuation it receives the
// result of the previous step and starts the next one.
type sequence struct {
	t     *turn
	steps []Step
	f     *frame
	k     continuation
	i     int
	// done completes the running step. One step runs at a time and completes once, so
	// the sequence reuses it rather than allocating one per step.
	done stepDone
}

func (q *sequence) resume(r result) {
	if r.err != nil || q.i == len(q.steps) {
		q.k.resume(r)
		return
	}
	s := &q.steps[q.i]
	q.i++
	q.done = stepDone{t: q.t, s: s, f: q.f, k: q}
	q.t.startStep(&q.done)
}

// stepDone completes a step in frame f: it receives the step's result, records it in
// steps.<id>, and passes it on to k through the ready queue.
type stepDone struct {
	t *turn
	s *Step
	f *frame
	k continuation
}

func (d *stepDone) resume(r result) {
	s := d.s
	// A set step's output is its variables, which the turn holds already.
	if s.ID != "" && r.err == nil && s.Set == nil && !d.t.holdValue(r.out, "steps."+s.ID+".output") {
		return
	}
	if s.ID != "" {
		var errVal any
		if r.err != nil {
			errVal = map[string]any{"kind": r.err.Kind, "message": r.err.Message}
		}
		d.t.scope(d.f).record(s.ID, &stepResult{output: r.out, err: errVal})
	}
	if r.err != nil && s.ContinueOnError {
		r = result{}
	}
	d.t.ready = append(d.t.ready, task{frame: d.f, k: d.k, r: r})
}

// runStep starts one step in frame f; k receives its result later, from the ready
// queue, and only while f is alive.
func (t *turn) runStep(s *Step, f *frame, k continuation) {
	t.startStep(&stepDone{t: t, s: s, f: f, k: k})
}

// startStep starts the step of done, which receives the step's result.
func (t *turn) startStep(done *stepDone) {
	s, f, k := done.s, done.f, done.k
	if s.If != nil {
		v, ok := t.render(s.If, f)
		if !ok {
			return
		}
		b, isBool := v.(bool)
		if !isBool {
			t.failWith(Failure{Kind: "expression", Message: fmt.Sprintf("%s: %s is not a boolean", s.If.t.path, jsonText(v))})
			return
		}
		if !b {
			if s.ID != "" {
				t.scope(f).record(s.ID, &stepResult{skipped: true})
			}
			t.ready = append(t.ready, task{frame: f, k: k})
			return
		}
	}
	switch {
	case s.Activity != nil:
		t.activity(s, f, 1, done)
	case s.Timer != nil:
		t.timerStep(s.Timer, f, done)
	case s.WaitEvent != nil:
		t.waitEvent(s, f, done)
	case s.SubOrchestration != nil:
		t.subOrchestration(s, f, done)
	case s.Parallel != nil:
		t.parallel(s.Parallel, f, done)
	case s.Race != nil:
		t.race(s.Race, f, done)
	case s.ForEach != nil:
		t.forEach(s.ForEach, f, done)
	case s.Set != nil:
		t.set(s, f, done)
	case s.Fail != nil:
		t.fail(s.Fail, f)
	case s.ContinueAsNew != nil:
		t.continueAsNew(s.ContinueAsNew, f)
	case s.Return != nil:
		t.returnOutput(s.Return, f)
	default:
		done.resume(result{})
	}
}
