package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
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
