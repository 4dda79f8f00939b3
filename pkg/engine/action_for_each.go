package engine

import (
	"fmt"
	"slices"
)

func (t *turn) forEach(fe *ForEachStep, f *frame, done continuation) {
	v, ok := t.render(&fe.Items, f)
	if !ok {
		return
	}
	items, isList := v.([]any)
	if !isList {
		t.failWith(Failure{Kind: "expression", Message: fmt.Sprintf("%s: %s is not a list", fe.Items.t.path, jsonText(v))})
		return
	}
	if len(items) == 0 {
		done.resume(result{out: []any{}})
		return
	}
	l := &forEachRun{t: t, fe: fe, f: f, done: done, items: items, outs: make([]any, len(items)), active: map[int]*frame{}}
	l.launch()
}

// forEachRun is a running for_each step.
type forEachRun struct {
	t     *turn
	fe    *ForEachStep
	f     *frame
	done  continuation
	items []any
	outs  []any
	// active holds the frames of the running iterations by index.
	active                   map[int]*frame
	next, running, completed int
	finished                 bool
}

// iteration is one iteration of a for_each step: its frame, the step results it scopes
// and the sequence of its steps, allocated together. As a continuation it receives the
// result of the iteration's last step.
type iteration struct {
	l     *forEachRun
	frame frame // its index is the iteration's
	scope stepScope
	steps sequence
}

// launch starts iterations while the concurrency allows.
func (l *forEachRun) launch() {
	for l.running < l.fe.Concurrency && l.next < len(l.items) {
		if l.t.fault != nil || l.t.final != nil || l.t.checkStop() || !l.t.hold(iterationOverhead) {
			return
		}
		i := l.next
		l.next++
		l.running++
		it := &iteration{l: l}
		it.frame = frame{parent: l.f, steps: &it.scope, item: l.items[i], index: int64(i), loop: true}
		it.steps = sequence{t: l.t, steps: l.fe.Steps, f: &it.frame, k: it}
		l.active[i] = &it.frame
		it.steps.resume(result{})
	}
}

func (it *iteration) resume(r result) {
	l, i := it.l, int(it.frame.index)
	if l.finished {
		return
	}
	if r.err != nil {
		l.finished = true
		delete(l.active, i)
		var others []*frame
		for _, j := range sortedIntKeys(l.active) {
			others = append(others, l.active[j])
		}
		l.t.cancel("for_each iteration failed", others...)
		l.done.resume(r)
		return
	}
	l.outs[i] = r.out
	delete(l.active, i)
	l.running--
	if l.completed++; l.completed == len(l.items) {
		l.finished = true
		l.done.resume(result{out: l.outs})
		return
	}
	l.launch()
}

func sortedIntKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// iterationOverhead is what a for_each iteration costs the turn's state.
const iterationOverhead = 32
