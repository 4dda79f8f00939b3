package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"cel.dev/cel-go/interpreter"
)

// frame is a unit of cancellation: a parallel or race branch, a for_each iteration, or
// the root. Frames of for_each iterations also scope step results and item/index.
type frame struct {
	parent    *frame
	steps     *stepScope // step results recorded in this scope, nil when inherited
	item      any
	index     int64
	loop      bool
	cancelled bool

	view  stepScopes // the steps variable inside for_each bodies, set on first use
	names activation // what expressions in this frame see
}

// stepScope holds the step results of one scope. The root's live in a map, which
// expressions outside for_each bodies see directly as steps; an iteration usually
// records a handful, which live in a small slice with inline storage until there are
// too many for a linear search.
type stepScope struct {
	root bool
	// shared: an expression holds m (the root's steps); the next record
	// copies it first, so that what the expression took stays as it was.
	shared  bool
	m       map[string]any
	entries []stepEntry
	inline  [2]stepEntry
}

// record stores the result of step id: as the JSON object in the root scope, which
// expressions may take whole, as a *stepResult in an iteration's.
func (s *stepScope) record(id string, r *stepResult) {
	if s.root {
		s.set(id, r.object())
		return
	}
	s.set(id, r)
}

type stepEntry struct {
	id     string
	result any
}

// maxScopeEntries is the number of results an iteration's scope keeps in its slice
// before it moves them to a map.
const maxScopeEntries = 8

func (s *stepScope) get(id string) (any, bool) {
	if s.m != nil {
		v, ok := s.m[id]
		return v, ok
	}
	for i := range s.entries {
		if s.entries[i].id == id {
			return s.entries[i].result, true
		}
	}
	return nil, false
}

func (s *stepScope) set(id string, v any) {
	if s.m != nil {
		if s.shared {
			s.m, s.shared = maps.Clone(s.m), false
		}
		s.m[id] = v
		return
	}
	for i := range s.entries {
		if s.entries[i].id == id {
			s.entries[i].result = v
			return
		}
	}
	if s.entries == nil {
		s.entries = s.inline[:0]
	}
	s.entries = append(s.entries, stepEntry{id: id, result: v})
	if len(s.entries) > maxScopeEntries {
		s.m = make(map[string]any, len(s.entries))
		for _, e := range s.entries {
			s.m[e.id] = e.result
		}
		s.entries = nil
	}
}

// each calls fn for every result of the scope.
func (s *stepScope) each(fn func(id string, v any)) {
	if s.m != nil {
		for id, v := range s.m {
			fn(id, v)
		}
		return
	}
	for _, e := range s.entries {
		fn(e.id, e.result)
	}
}

func (f *frame) child() *frame { return &frame{parent: f} }

// dead reports whether the frame or one of its ancestors was cancelled.
func (f *frame) dead() bool {
	for g := f; g != nil; g = g.parent {
		if g.cancelled {
			return true
		}
	}
	return false
}

// activation resolves the names of expressions for a frame.
type activation struct {
	t *turn
	f *frame
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "input":
		return a.t.input, true
	case "vars":
		a.t.varsShared = true
		return a.t.vars, true
	case "instance":
		return a.t.instanceValue(), true
	case "steps":
		return a.f.stepScopes(), true
	case "item", "index":
		for g := a.f; g != nil; g = g.parent {
			if g.loop {
				if name == "item" {
					return g.item, true
				}
				return g.index, true
			}
		}
	}
	return nil, false
}

func (*activation) Parent() interpreter.Activation { return nil }

// stepScopes returns the step results a frame sees: the root's map, or, inside for_each
// bodies, the scopes of the nested iterations layered innermost first.
func (f *frame) stepScopes() any {
	for g := f; g != nil; g = g.parent {
		if g.steps == nil {
			continue
		}
		if g.steps.root {
			g.steps.shared = true
			return g.steps.m
		}
		break
	}
	f.view.f = f
	return &f.view
}

func (t *turn) scope(f *frame) *stepScope {
	for g := f; g != nil; g = g.parent {
		if g.steps != nil {
			return g.steps
		}
	}
	return t.root.steps
}

// render evaluates a value; on error it fails the execution and returns false.
func (t *turn) render(v *Value, f *frame) (any, bool) {
	if v == nil {
		return nil, true
	}
	if f.names.t == nil {
		f.names = activation{t: t, f: f}
	}
	t.value.left = t.limits.MaxValueBytes
	out, err := v.t.render(&f.names, &t.value)
	if err != nil {
		t.failWith(Failure{Kind: failureKind(err), Message: err.Error()})
		return nil, false
	}
	return out, true
}

func (t *turn) renderDuration(v *Value, f *frame) (time.Duration, bool) {
	out, ok := t.render(v, f)
	if !ok {
		return 0, false
	}
	s, isStr := out.(string)
	d, err := parseDuration(s)
	if !isStr || err != nil {
		t.failWith(Failure{Kind: "expression", Message: fmt.Sprintf("%s: %v is not a duration", v.t.path, jsonText(out))})
		return 0, false
	}
	return d, true
}

func jsonText(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(raw)
}
