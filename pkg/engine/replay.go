package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"cel.dev/cel-go/interpreter"
)

// turn is the interpreter of one execution during one turn. It replays the history by
// running the definition: every event the definition produces (a decision) must equal
// the next history event, and every event that answers one (an input) is fed back in
// history order. Once the history is exhausted, the messages are turned into input
// events, and what the definition then produces becomes the history delta.
type turn struct {
	def *Definition
	in  TurnInput

	seq        int64   // events replayed or recorded so far
	delta      []Event // events recorded beyond the history
	fault      *Failure
	final      Event // the execution's terminal event, once it ended
	finalIsNew bool

	started  bool
	input    any
	parent   *ParentRef
	instance map[string]any // made on first use: see instanceValue
	vars     map[string]any
	// varsShared: an expression holds vars; the next set copies it first,
	// so that what the expression took stays as it was.
	varsShared bool
	root       *frame

	activities map[int64]*pending
	timers     map[int64]*pending
	// forgotten are the timers dropped before they fired, past the
	// history: their messages are queued, and the decision withdraws them.
	forgotten []int64
	children  map[int64]*pending
	events    map[string]*eventQueue

	ready []task

	limits Limits
	// value measures each value a render builds; state what the turn holds.
	value, state meter
	// varBytes is the size of each variable, which state holds until it is replaced.
	varBytes map[string]int64
	// stopped: in.Stop closed, and the turn gave up.
	stopped bool
	ending  bool // end is recording the execution's last events
}

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

// pending is something outstanding that a later input event answers.
type pending struct {
	frame      *frame
	name       string // activity or child name
	instanceID string // child instance id
	timeout    int64  // the timeout timer of an activity attempt or event wait
	// resume receives the answer: activity or child output or failure, event payload,
	// or nothing for a timer.
	resume continuation
}

type eventQueue struct {
	buffered []any
	waiters  []*pending
}

// continuation receives a result: of a step, or of something outstanding. The
// interpreter's own state types (sequences, step completions, iterations, activity
// attempts) implement it, so that the hot path allocates no closures.
type continuation interface {
	resume(result)
}

// resumeFunc adapts a function to a continuation.
type resumeFunc func(result)

func (k resumeFunc) resume(r result) { k(r) }

// fireFunc adapts a function that needs no result (a timer firing) to a continuation.
type fireFunc func()

func (fire fireFunc) resume(result) { fire() }

// task is a ready continuation: run, or k applied to r (which saves a closure on the
// hot path).
type task struct {
	frame *frame
	run   func()
	k     continuation
	r     result
}

type result struct {
	out any
	err *Failure
}

func newTurn(def *Definition, in TurnInput) *turn {
	limits := in.Limits.withDefaults()
	return &turn{
		def:        def,
		in:         in,
		vars:       map[string]any{},
		activities: map[int64]*pending{},
		// timers, children and events are made on first use.
		limits: limits,
		value:  *newMeter("the value", limits.MaxValueBytes),
		state:  *newMeter("the turn's state", limits.MaxStateBytes),
	}
}

// hold adds n bytes to what the turn holds; past the limit the execution fails.
func (t *turn) hold(n int64) bool {
	if t.ending {
		// The events that end the execution (cancellations of what is outstanding,
		// which the turn holds already, and the terminal event) are not refused.
		return true
	}
	if err := t.state.spend(int(n)); err != nil {
		t.failWith(Failure{Kind: FailureKindLimit, Message: err.Error()})
		return false
	}
	return true
}

// holdValue measures v, which the turn is to hold, against the value limit and holds it.
func (t *turn) holdValue(v any, what string) bool {
	t.value.left = t.limits.MaxValueBytes
	if err := measure(v, &t.value); err != nil {
		t.failWith(Failure{Kind: FailureKindLimit, Message: what + ": " + err.Error()})
		return false
	}
	return t.hold(t.value.used())
}

// checkStop gives up the turn once in.Stop has closed.
func (t *turn) checkStop() bool {
	if t.in.Stop == nil {
		return false
	}
	select {
	case <-t.in.Stop:
		t.stopped = true
		t.fault = &Failure{Kind: FailureKindLimit, Message: "the turn was stopped"}
		t.ready = nil
		return true
	default:
		return false
	}
}

// eventBytes is what an event costs the turn's state.
func eventBytes(e Event) int64 {
	n := int64(eventOverhead)
	switch x := e.(type) {
	case ExecutionStarted:
		n += int64(len(x.Input))
	case ActivityScheduled:
		n += int64(len(x.Input))
	case ActivityCompleted:
		n += int64(len(x.Result))
	case ChildScheduled:
		n += int64(len(x.Input))
	case ChildCompleted:
		n += int64(len(x.Result))
	case EventReceived:
		n += int64(len(x.Payload))
	case ExecutionCompleted:
		n += int64(len(x.Output))
	case ContinuedAsNew:
		n += int64(len(x.Input))
	}
	return n
}

func (t *turn) run(msgs []Message) {
	for i, e := range t.in.History {
		want := int64(i + 1)
		var got string
		switch {
		case e == nil:
			got = "nil"
		case reflect.TypeOf(e).Kind() == reflect.Pointer:
			got = fmt.Sprintf("a %T (events are values, not pointers)", e)
		case e.EventID() != want:
			got = fmt.Sprintf("%s event %d", e.Kind(), e.EventID())
		default:
			continue
		}
		t.nondeterministic(nil, fmt.Sprintf("history position %d holds %s, want event id %d", want, got, want))
		return
	}
	if first, ok := t.peek().(ExecutionStarted); ok && (first.Name != t.def.Name || first.Version != t.def.Version) {
		t.nondeterministic(first, fmt.Sprintf("the history belongs to %s version %s, not %s version %s", first.Name, first.Version, t.def.Name, t.def.Version))
		return
	}
	for t.fault == nil && t.seq < int64(len(t.in.History)) {
		h := t.in.History[t.seq]
		switch {
		case t.final != nil:
			t.nondeterministic(h, "it follows the end of the execution")
		case !isInput(h.Kind()):
			t.nondeterministic(h, "the definition does not produce it at this point")
		case !t.accepts(h):
			t.nondeterministic(h, "it answers nothing outstanding")
		default:
			t.seq++
			t.apply(h)
			t.drain()
		}
	}
	if t.fault != nil {
		return
	}
	for _, m := range msgs {
		if t.final != nil {
			return
		}
		e := t.event(m)
		if e == nil || !t.accepts(e) {
			continue
		}
		if !t.hold(eventBytes(e)) {
			return
		}
		t.seq++
		e = e.setID(t.seq)
		t.delta = append(t.delta, e)
		t.apply(e)
		t.drain()
	}
}

func isInput(k EventKind) bool {
	switch k {
	case KindExecutionStarted, KindActivityCompleted, KindActivityFailed, KindTimerFired,
		KindEventReceived, KindChildCompleted, KindChildFailed, KindCancelRequested:
		return true
	}
	return false
}

func (t *turn) nondeterministic(h Event, reason string) {
	if t.fault != nil {
		return
	}
	msg := "nondeterministic history: " + reason
	if h != nil {
		msg = fmt.Sprintf("nondeterministic history: event %d (%s): %s", h.EventID(), h.Kind(), reason)
	}
	t.fault = &Failure{Kind: "nondeterministic", Message: msg}
	t.ready = nil
}

// event converts a message into the input event it stands for, or nil when the message
// does not concern this execution.
func (t *turn) event(m Message) Event {
	switch x := m.(type) {
	case StartMessage:
		return ExecutionStarted{Name: t.def.Name, Version: t.def.Version, Input: jsonOrString(x.Input), Parent: x.Parent}
	case ActivityCompletedMessage:
		if x.ExecutionID == t.in.ExecutionID && t.attemptMatches(x.ActivityID, x.Attempt) {
			result, ok := compactJSON(x.Result)
			if !ok {
				return ActivityFailed{ScheduledID: x.ActivityID, Failure: Failure{Kind: "activity_failed", Message: "the activity's result is not JSON"}}
			}
			return ActivityCompleted{ScheduledID: x.ActivityID, Result: result}
		}
	case ActivityFailedMessage:
		if x.ExecutionID == t.in.ExecutionID && t.attemptMatches(x.ActivityID, x.Attempt) {
			return ActivityFailed{ScheduledID: x.ActivityID, Failure: x.Failure}
		}
	case TimerFiredMessage:
		if x.ExecutionID == t.in.ExecutionID {
			return TimerFired{TimerID: x.TimerID}
		}
	case EventRaisedMessage:
		return EventReceived{Name: x.Name, Payload: jsonOrString(x.Payload)}
	case ChildCompletedMessage:
		if x.ExecutionID == t.in.ExecutionID && t.childMatches(x.ScheduledID, x.ChildInstanceID) {
			result, ok := compactJSON(x.Result)
			if !ok {
				return ChildFailed{ScheduledID: x.ScheduledID, Failure: Failure{Kind: "child_failed", Message: "the child's output is not JSON"}}
			}
			return ChildCompleted{ScheduledID: x.ScheduledID, Result: result}
		}
	case ChildFailedMessage:
		if x.ExecutionID == t.in.ExecutionID && t.childMatches(x.ScheduledID, x.ChildInstanceID) {
			return ChildFailed{ScheduledID: x.ScheduledID, Failure: x.Failure}
		}
	case CancelMessage:
		return CancelRequested{Reason: x.Reason}
	}
	return nil
}

// compactJSON returns raw without insignificant space, the form the codec stores, or
// false when raw is not JSON. Empty stays empty (null).
func compactJSON(raw json.RawMessage) (json.RawMessage, bool) {
	if len(raw) == 0 {
		return nil, true
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, false
	}
	return b.Bytes(), true
}

// jsonOrString returns raw compacted, or, when it is not JSON, its text as a JSON
// string, so that a malformed input or event payload cannot wedge an instance.
func jsonOrString(raw json.RawMessage) json.RawMessage {
	if out, ok := compactJSON(raw); ok {
		return out
	}
	out, _ := json.Marshal(strings.ToValidUTF8(string(raw), "\uFFFD"))
	return out
}

func (t *turn) attemptMatches(id int64, attempt int) bool {
	p := t.activities[id]
	return p != nil && (attempt == 0 || attempt == t.attemptOf(id))
}

// attemptOf returns the attempt number recorded for an activity id.
func (t *turn) attemptOf(id int64) int {
	if e, ok := t.eventAt(id).(ActivityScheduled); ok {
		return e.Attempt
	}
	return 0
}

// eventAt returns the recorded or replayed event with an id.
func (t *turn) eventAt(id int64) Event {
	n := int64(len(t.in.History))
	switch {
	case id >= 1 && id <= n:
		return t.in.History[id-1]
	case id > n && id-n <= int64(len(t.delta)):
		return t.delta[id-n-1]
	}
	return nil
}

func (t *turn) childMatches(id int64, instanceID string) bool {
	p := t.children[id]
	return p != nil && p.instanceID == instanceID
}

// accepts reports whether an input event answers something outstanding.
func (t *turn) accepts(e Event) bool {
	if t.final != nil {
		return false
	}
	switch x := e.(type) {
	case ExecutionStarted:
		return !t.started && x.Name == t.def.Name && x.Version == t.def.Version
	case ActivityCompleted:
		return t.started && t.activities[x.ScheduledID] != nil
	case ActivityFailed:
		return t.started && t.activities[x.ScheduledID] != nil
	case TimerFired:
		return t.started && t.timers[x.TimerID] != nil
	case EventReceived:
		return t.started
	case ChildCompleted:
		return t.started && t.children[x.ScheduledID] != nil
	case ChildFailed:
		return t.started && t.children[x.ScheduledID] != nil
	case CancelRequested:
		return t.started
	}
	return false
}

// apply feeds an accepted input event to the definition.
func (t *turn) apply(e Event) {
	switch x := e.(type) {
	case ExecutionStarted:
		t.start(x)
	case ActivityCompleted:
		p := t.activities[x.ScheduledID]
		delete(t.activities, x.ScheduledID)
		t.answerResult(p, x.Result, "activity_failed")
	case ActivityFailed:
		p := t.activities[x.ScheduledID]
		delete(t.activities, x.ScheduledID)
		f := x.Failure
		t.answer(p, nil, &f)
	case TimerFired:
		p := t.timers[x.TimerID]
		delete(t.timers, x.TimerID)
		t.answer(p, nil, nil)
	case EventReceived:
		payload, err := decodeJSON(x.Payload)
		if err != nil {
			payload = string(x.Payload)
		}
		q := t.queue(x.Name)
		if len(q.waiters) == 0 {
			q.buffered = append(q.buffered, payload)
			return
		}
		p := q.waiters[0]
		q.waiters = q.waiters[1:]
		t.answer(p, payload, nil)
	case ChildCompleted:
		p := t.children[x.ScheduledID]
		delete(t.children, x.ScheduledID)
		t.answerResult(p, x.Result, "child_failed")
	case ChildFailed:
		p := t.children[x.ScheduledID]
		delete(t.children, x.ScheduledID)
		f := x.Failure
		t.answer(p, nil, &f)
	case CancelRequested:
		t.end(ExecutionCancelled{Reason: x.Reason}, "execution cancelled")
	}
}

// answerResult answers p with a JSON result, or with a failure of the given
// kind when the result is not JSON.
func (t *turn) answerResult(p *pending, result []byte, failKind string) {
	if int64(len(result)) > t.limits.MaxValueBytes {
		t.answer(p, nil, &Failure{Kind: FailureKindLimit, Message: "result: " + (&LimitError{What: "the value", Limit: t.limits.MaxValueBytes}).Error()})
		return
	}
	out, err := decodeJSON(result)
	if err != nil {
		t.answer(p, nil, &Failure{Kind: failKind, Message: "result is not JSON: " + err.Error()})
		return
	}
	t.answer(p, out, nil)
}

func (t *turn) answer(p *pending, out any, f *Failure) {
	t.ready = append(t.ready, task{frame: p.frame, k: p.resume, r: result{out: out, err: f}})
}

func (t *turn) queue(name string) *eventQueue {
	q := t.events[name]
	if q == nil {
		q = &eventQueue{}
		if t.events == nil {
			t.events = map[string]*eventQueue{}
		}
		t.events[name] = q
	}
	return q
}

func (t *turn) later(f *frame, run func()) {
	t.ready = append(t.ready, task{frame: f, run: run})
}

// drain runs ready continuations until every branch waits.
func (t *turn) drain() {
	for i := 0; i < len(t.ready); i++ {
		if t.final != nil || t.fault != nil || t.checkStop() {
			break
		}
		tk := t.ready[i]
		switch {
		case tk.frame.dead():
		case tk.run != nil:
			tk.run()
		default:
			tk.k.resume(tk.r)
		}
	}
	t.ready = t.ready[:0]
}

// peek returns the next history event to replay, or nil past the history.
func (t *turn) peek() Event {
	if t.seq < int64(len(t.in.History)) {
		return t.in.History[t.seq]
	}
	return nil
}

// record produces a decision event. While replaying, it must equal the next history
// event, which is returned; past the history it is appended to the delta.
func (t *turn) record(e Event) (Event, bool) {
	if t.fault != nil || t.final != nil {
		return nil, false
	}
	if h := t.peek(); h != nil {
		if !sameDecision(h, e) {
			t.nondeterministic(h, fmt.Sprintf("the definition produces %s here", describe(e)))
			return nil, false
		}
		t.seq++
		return h, true
	}
	if !t.hold(eventBytes(e)) {
		return nil, false
	}
	t.seq++
	e = e.setID(t.seq)
	t.delta = append(t.delta, e)
	return e, true
}

// sameDecision compares the parts of a decision event that the definition determines.
func sameDecision(h, e Event) bool {
	if h.Kind() != e.Kind() {
		return false
	}
	switch x := e.(type) {
	case ActivityScheduled:
		y := h.(ActivityScheduled)
		return x.Name == y.Name && x.TaskQueue == y.TaskQueue && x.Attempt == y.Attempt
	case ChildScheduled:
		y := h.(ChildScheduled)
		return x.Name == y.Name && x.InstanceID == y.InstanceID
	case TimerCreated:
		return x.Purpose == h.(TimerCreated).Purpose
	case ActivityCancelRequested:
		return x.ScheduledID == h.(ActivityCancelRequested).ScheduledID
	case ChildCancelRequested:
		return x.ScheduledID == h.(ChildCancelRequested).ScheduledID
	}
	return true
}

func describe(e Event) string {
	switch x := e.(type) {
	case ActivityScheduled:
		return fmt.Sprintf("activity_scheduled %q attempt %d", x.Name, x.Attempt)
	case ChildScheduled:
		return fmt.Sprintf("child_scheduled %q", x.Name)
	case TimerCreated:
		return fmt.Sprintf("timer_created (%s)", x.Purpose)
	case ActivityCancelRequested:
		return fmt.Sprintf("activity_cancel_requested for activity %d", x.ScheduledID)
	case ChildCancelRequested:
		return fmt.Sprintf("child_cancel_requested for child %d", x.ScheduledID)
	}
	return string(e.Kind())
}

// start begins the execution from its started event.
func (t *turn) start(e ExecutionStarted) {
	t.started = true
	t.parent = e.Parent
	t.root = &frame{steps: &stepScope{root: true, m: map[string]any{}}}
	if int64(len(e.Input)) > t.limits.MaxValueBytes {
		t.later(t.root, func() {
			t.failWith(Failure{Kind: FailureKindLimit, Message: "input: " + (&LimitError{What: "the value", Limit: t.limits.MaxValueBytes}).Error()})
		})
		return
	}
	input, err := decodeJSON(e.Input)
	if err != nil {
		t.later(t.root, func() { t.failWith(Failure{Kind: "input", Message: "input is not JSON: " + err.Error()}) })
		return
	}
	t.input = input
	if !t.hold(int64(len(e.Input))) {
		return
	}
	t.later(t.root, func() {
		t.runSteps(t.def.Steps, t.root, resumeFunc(func(r result) {
			if r.err != nil {
				t.failWith(*r.err)
				return
			}
			out, ok := t.render(t.def.Output, t.root)
			if ok {
				t.complete(out)
			}
		}))
	})
}

// instanceValue returns the instance variable of expressions, made on first use.
func (t *turn) instanceValue() map[string]any {
	if t.instance == nil {
		var parentID any
		if t.parent != nil {
			parentID = t.parent.InstanceID
		}
		t.instance = map[string]any{
			"id":           t.in.InstanceID,
			"execution_id": t.in.ExecutionID,
			"name":         t.def.Name,
			"version":      t.def.Version,
			"parent":       parentID,
		}
	}
	return t.instance
}

// end cancels everything outstanding and records the execution's terminal event.
func (t *turn) end(final Event, reason string) {
	if t.final != nil || t.fault != nil || t.ending {
		return
	}
	t.ending = true
	defer func() { t.ending = false }()
	t.sweep(reason, func(*pending) bool { return true })
	e, ok := t.record(final)
	if !ok {
		return
	}
	t.final = e
	t.finalIsNew = t.seq > int64(len(t.in.History))
	t.ready = nil
}

func (t *turn) failWith(f Failure) { t.end(ExecutionFailed{Failure: f}, "execution failed") }

func (t *turn) complete(out any) {
	raw, err := encodeJSON(out)
	if err != nil {
		t.failWith(Failure{Kind: "expression", Message: "output: " + err.Error()})
		return
	}
	t.end(ExecutionCompleted{Output: raw}, "execution completed")
}

// cancel cancels the frames and what is outstanding in them.
func (t *turn) cancel(reason string, frames ...*frame) {
	if len(frames) == 0 {
		return
	}
	for _, f := range frames {
		f.cancelled = true
	}
	// Waits of frames cancelled earlier are gone already, so a dead frame now means one
	// of frames.
	t.sweep(reason, func(p *pending) bool { return p.frame.dead() })
}

// sweep removes the outstanding waits that gone selects: activities and children get
// cancel events, timers and event waits are forgotten.
func (t *turn) sweep(reason string, gone func(*pending) bool) {
	for _, id := range sortedIDs(t.activities) {
		if p := t.activities[id]; gone(p) {
			delete(t.activities, id)
			if _, ok := t.record(ActivityCancelRequested{ScheduledID: id, Reason: reason}); !ok {
				return
			}
		}
	}
	for _, id := range sortedIDs(t.children) {
		if p := t.children[id]; gone(p) {
			delete(t.children, id)
			if _, ok := t.record(ChildCancelRequested{ScheduledID: id, InstanceID: p.instanceID, Reason: reason}); !ok {
				return
			}
		}
	}
	for id, p := range t.timers {
		if gone(p) {
			t.forgetTimer(id)
		}
	}
	for _, q := range t.events {
		q.waiters = slices.DeleteFunc(q.waiters, gone)
	}
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
		if d, ok := t.renderDuration(s.Timer, f); ok {
			t.timer(d, "timer", f, func() { done.resume(result{}) })
		}
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
	case s.Fail != nil:
		if msg, ok := t.render(s.Fail, f); ok {
			text, isStr := msg.(string)
			if !isStr {
				text = jsonText(msg)
			}
			t.failWith(Failure{Kind: "fail", Message: text})
		}
	case s.ContinueAsNew != nil:
		if in, ok := t.render(&s.ContinueAsNew.Input, f); ok {
			raw, err := encodeJSON(in)
			if err != nil {
				t.failWith(Failure{Kind: "expression", Message: "continue_as_new input: " + err.Error()})
				return
			}
			t.end(ContinuedAsNew{Input: raw}, "continued as new")
		}
	case s.Return != nil:
		if out, ok := t.render(s.Return, f); ok {
			t.complete(out)
		}
	default:
		done.resume(result{})
	}
}

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

func (t *turn) parallel(branches []Step, f *frame, done continuation) {
	outs := make([]any, len(branches))
	frames := make([]*frame, len(branches))
	remaining, finished := len(branches), false
	for i := range branches {
		bf := f.child()
		frames[i] = bf
		t.runStep(&branches[i], bf, resumeFunc(func(r result) {
			if finished {
				return
			}
			if r.err != nil {
				finished = true
				t.cancel("parallel branch failed", slices.Delete(slices.Clone(frames), i, i+1)...)
				done.resume(r)
				return
			}
			outs[i] = r.out
			if remaining--; remaining == 0 {
				finished = true
				done.resume(result{out: outs})
			}
		}))
	}
}

func (t *turn) race(branches []Step, f *frame, done continuation) {
	frames := make([]*frame, len(branches))
	finished := false
	for i := range branches {
		bf := f.child()
		frames[i] = bf
		t.runStep(&branches[i], bf, resumeFunc(func(r result) {
			if finished {
				return
			}
			finished = true
			t.cancel("race lost", slices.Delete(slices.Clone(frames), i, i+1)...)
			if r.err != nil {
				done.resume(r)
				return
			}
			var id any
			if branches[i].ID != "" {
				id = branches[i].ID
			}
			done.resume(result{out: map[string]any{"index": int64(i), "id": id, "output": r.out}})
		}))
	}
}

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

// iterationOverhead is what a for_each iteration costs the turn's state.
const iterationOverhead = 32

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
