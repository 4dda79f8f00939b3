package engine

import "fmt"

func (t *turn) subOrchestration(s *Step, f *frame, done continuation) {
	c := s.SubOrchestration
	e := ChildScheduled{Name: c.Name, Version: c.Version}
	if h, ok := t.peek().(ChildScheduled); ok && h.Name == c.Name {
		e.InstanceID = h.InstanceID
	} else {
		in, ok := t.render(&c.Input, f)
		if !ok {
			return
		}
		raw, err := encodeJSON(in)
		if err != nil {
			t.failWith(Failure{Kind: "expression", Message: c.Input.t.path + ": " + err.Error()})
			return
		}
		e.Input = raw
		e.InstanceID = fmt.Sprintf("%s:%d:%d", t.in.InstanceID, t.in.ExecutionID, t.seq+1)
		if c.InstanceID != nil {
			id, ok := t.render(c.InstanceID, f)
			if !ok {
				return
			}
			str, isStr := id.(string)
			if !isStr || str == "" || len(str) > 200 {
				t.failWith(Failure{Kind: "expression", Message: fmt.Sprintf("%s: %s is not an instance id", c.InstanceID.t.path, jsonText(id))})
				return
			}
			e.InstanceID = str
		}
	}
	rec, ok := t.record(e)
	if !ok {
		return
	}
	if t.children == nil {
		t.children = map[int64]*pending{}
	}
	t.children[rec.EventID()] = &pending{frame: f, name: c.Name, instanceID: e.InstanceID, resume: resumeFunc(func(r result) {
		if r.err != nil {
			done.resume(result{err: &Failure{Kind: "child_failed", Message: fmt.Sprintf("sub-orchestration %s (%s) failed: %s", c.Name, e.InstanceID, r.err.Message)}})
			return
		}
		done.resume(r)
	})}
}
