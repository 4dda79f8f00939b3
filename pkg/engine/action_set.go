package engine

import "maps"

// set renders the step's variables in name order, holding each one's size
// in the turn's state, then assigns them all at once: the step's output is
// the variables it set.
func (t *turn) set(s *Step, f *frame, done continuation) {
	values := make(map[string]any, len(s.setKeys))
	if t.varBytes == nil {
		t.varBytes = map[string]int64{}
	}
	for i, name := range s.setKeys {
		out, ok := t.render(&s.setValues[i], f)
		if !ok {
			return
		}
		// The variable's previous value is released as the new one is held.
		n := t.value.used()
		t.state.left += t.varBytes[name]
		t.varBytes[name] = n
		if !t.hold(n) {
			return
		}
		values[name] = out
	}
	if t.varsShared {
		t.vars, t.varsShared = maps.Clone(t.vars), false
	}
	for _, name := range s.setKeys {
		t.vars[name] = values[name]
	}
	done.resume(result{out: values})
}
