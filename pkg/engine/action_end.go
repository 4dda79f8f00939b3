package engine

// The actions that end the execution: fail, continue_as_new and return.

// fail fails the execution with the message v renders to (as JSON text when
// it is not a string).
func (t *turn) fail(v *Value, f *frame) {
	msg, ok := t.render(v, f)
	if !ok {
		return
	}
	text, isStr := msg.(string)
	if !isStr {
		text = jsonText(msg)
	}
	t.failWith(Failure{Kind: "fail", Message: text})
}

// continueAsNew ends the execution and starts the next one with the input
// the step renders.
func (t *turn) continueAsNew(c *ContinueAsNewStep, f *frame) {
	in, ok := t.render(&c.Input, f)
	if !ok {
		return
	}
	raw, err := encodeJSON(in)
	if err != nil {
		t.failWith(Failure{Kind: "expression", Message: "continue_as_new input: " + err.Error()})
		return
	}
	t.end(ContinuedAsNew{Input: raw}, "continued as new")
}

// returnOutput completes the execution with the output v renders to.
func (t *turn) returnOutput(v *Value, f *frame) {
	if out, ok := t.render(v, f); ok {
		t.complete(out)
	}
}
