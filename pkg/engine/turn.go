package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Status is the state of an execution after a turn.
type Status string

// The execution statuses.
const (
	StatusRunning        Status = "Running"
	StatusCompleted      Status = "Completed"
	StatusFailed         Status = "Failed"
	StatusCancelled      Status = "Cancelled"
	StatusContinuedAsNew Status = "ContinuedAsNew"
)

// Statuses are every status a turn can leave an execution in.
func Statuses() []Status {
	return []Status{StatusRunning, StatusCompleted, StatusFailed, StatusCancelled, StatusContinuedAsNew}
}

// TurnInput is everything a turn reads: the instance, the current execution's history
// and the new messages, and the turn's time (the engine has no clock).
type TurnInput struct {
	InstanceID  string
	ExecutionID int64
	// History is the execution's history so far, event ids 1, 2, 3, ...
	History []Event
	// Messages are applied in order, except that a start message goes first.
	Messages []Message
	Now      time.Time
	// Limits bound the values and the state the turn builds; zero fields take the
	// defaults.
	Limits Limits
	// Stop, when it is closed, ends the turn early with ErrTurnStopped: the caller's
	// time budget for the turn ran out. A nil Stop never ends a turn.
	Stop <-chan struct{}
}

// Decision is what a turn decided. The caller applies it atomically: append Events to
// the history, enqueue Activities on the worker queue and Timers and the other messages
// on the orchestrator queue, delete the worker rows of CancelActivities, and record the
// Outcome.
type Decision struct {
	// Events is the history delta; ids continue those of the history.
	Events []Event
	// Activities are the activity attempts to enqueue for workers.
	Activities []ActivityTask
	// Timers are the timer messages to deliver later.
	Timers []Timer
	// CancelTimers are timer messages queued by earlier turns that will
	// never matter (the race they were in is decided, the wait they bounded
	// has ended): remove them from the queue. A timer created and dropped
	// in the same turn appears in neither list.
	CancelTimers []TimerFiredMessage
	// Children are the sub-orchestration instances to create and start.
	Children []ChildStart
	// CancelActivities are the ids of outstanding activities whose worker rows must go.
	// An activity scheduled and cancelled in the same turn appears in neither list.
	CancelActivities []int64
	// CancelChildren are cancel messages for running children.
	CancelChildren []Envelope
	// ParentMessage, set when a sub-orchestration ends, reports to the parent.
	ParentMessage *Envelope
	Outcome       Outcome
}

// ActivityTask is an activity attempt for the worker queue.
type ActivityTask struct {
	// ActivityID is the id of the attempt's activity_scheduled event.
	ActivityID int64
	Name       string
	TaskQueue  string
	Input      json.RawMessage
	Attempt    int
}

// Timer is a message to deliver to the instance itself after Delay from the turn's time.
type Timer struct {
	TimerID int64
	Delay   time.Duration
	Message TimerFiredMessage
}

// ChildStart asks the caller to create a child instance and deliver Message to it.
type ChildStart struct {
	InstanceID string
	Name       string
	// Version is empty when the step pins none: use the latest registered version.
	Version string
	Input   json.RawMessage
	Message StartMessage
}

// Envelope is a message for another instance.
type Envelope struct {
	InstanceID string
	Message    Message
}

// Outcome is the state of the execution after the turn.
type Outcome struct {
	Status Status
	// Output is set when Status is Completed.
	Output json.RawMessage
	// Failure is set when Status is Failed.
	Failure *Failure
	// Reason is the cancel reason when Status is Cancelled.
	Reason string
	// Next, set when Status is ContinuedAsNew, starts the next execution.
	Next *StartMessage
}

// ErrNotStarted is returned by Turn when there is neither history nor a start message.
var ErrNotStarted = errors.New("engine: execution has no history and no start message")

// ErrTurnStopped is returned by Turn when TurnInput.Stop closed before the turn ended.
// The turn decided nothing.
var ErrTurnStopped = errors.New("engine: the turn was stopped before it ended")

// Turn runs one turn of an execution: it replays History against the definition,
// applies Messages in order, and returns the decision. It is deterministic: equal inputs
// give equal decisions. Problems of the execution (nondeterministic history, expression
// errors, failed steps) are outcomes, not errors; the error reports misuse only.
func Turn(def *Definition, in TurnInput) (d Decision, err error) {
	if def == nil {
		return Decision{}, errors.New("engine: turn without a definition")
	}
	if in.InstanceID == "" || in.ExecutionID < 1 {
		return Decision{}, fmt.Errorf("engine: turn needs an instance id and an execution id >= 1 (got %q, %d)", in.InstanceID, in.ExecutionID)
	}
	msgs := in.Messages
	if len(in.History) == 0 {
		i := slices.IndexFunc(msgs, func(m Message) bool { _, ok := m.(StartMessage); return ok })
		if i < 0 {
			return Decision{}, ErrNotStarted
		}
		msgs = append(append([]Message{msgs[i]}, msgs[:i]...), msgs[i+1:]...)
	}
	defer func() {
		if r := recover(); r != nil {
			in.Messages = msgs
			d, _ = Fail(in, def.Name, def.Version, Failure{Kind: "internal", Message: fmt.Sprintf("engine panic: %v", r)})
		}
	}()
	t := newTurn(def, in)
	t.run(msgs)
	if t.stopped {
		return Decision{}, ErrTurnStopped
	}
	return t.decision(), nil
}

// Fail builds the decision that ends an execution as Failed without running its
// definition: for when no turn can run (the definition is missing, say). Outstanding
// activities and children are cancelled and a parent is told. An execution with no
// history yet is started first, from the start message among in.Messages, so that the
// failure has its context; ErrNotStarted when there is none.
func Fail(in TurnInput, name, version string, f Failure) (Decision, error) {
	if len(in.History) > 0 {
		return abort(in, f), nil
	}
	i := slices.IndexFunc(in.Messages, func(m Message) bool { _, ok := m.(StartMessage); return ok })
	if i < 0 {
		return Decision{}, ErrNotStarted
	}
	start := in.Messages[i].(StartMessage)
	in.History = []Event{ExecutionStarted{ID: 1, Name: name, Version: version, Input: start.Input, Parent: start.Parent}}
	d := abort(in, f)
	d.Events = append(in.History, d.Events...)
	return d, nil
}

// abort builds the decision that fails the execution whatever its history says:
// outstanding activities and children are cancelled, then ExecutionFailed is appended.
func abort(in TurnInput, f Failure) Decision {
	activities, children, timers := map[int64]bool{}, map[int64]string{}, map[int64]bool{}
	var parent *ParentRef
	for _, e := range in.History {
		switch x := e.(type) {
		case ExecutionStarted:
			parent = x.Parent
		case TimerCreated:
			timers[x.ID] = true
		case TimerFired:
			delete(timers, x.TimerID)
		case ActivityScheduled:
			activities[x.ID] = true
		case ActivityCompleted:
			delete(activities, x.ScheduledID)
		case ActivityFailed:
			delete(activities, x.ScheduledID)
		case ActivityCancelRequested:
			delete(activities, x.ScheduledID)
		case ChildScheduled:
			children[x.ID] = x.InstanceID
		case ChildCompleted:
			delete(children, x.ScheduledID)
		case ChildFailed:
			delete(children, x.ScheduledID)
		case ChildCancelRequested:
			delete(children, x.ScheduledID)
		}
	}
	var d Decision
	// Timers that have not fired (some perhaps dropped earlier, whose
	// withdrawal finds nothing left).
	for _, id := range sortedIDs(timers) {
		d.CancelTimers = append(d.CancelTimers, TimerFiredMessage{ExecutionID: in.ExecutionID, TimerID: id})
	}
	next := int64(len(in.History)) + 1
	for _, id := range sortedIDs(activities) {
		d.Events = append(d.Events, ActivityCancelRequested{ID: next, ScheduledID: id, Reason: "execution failed"})
		d.CancelActivities = append(d.CancelActivities, id)
		next++
	}
	for _, id := range sortedIDs(children) {
		d.Events = append(d.Events, ChildCancelRequested{ID: next, ScheduledID: id, InstanceID: children[id], Reason: "execution failed"})
		d.CancelChildren = append(d.CancelChildren, Envelope{InstanceID: children[id], Message: CancelMessage{Reason: "parent execution failed"}})
		next++
	}
	d.Events = append(d.Events, ExecutionFailed{ID: next, Failure: f})
	d.Outcome = Outcome{Status: StatusFailed, Failure: &f}
	if parent != nil {
		d.ParentMessage = &Envelope{InstanceID: parent.InstanceID, Message: ChildFailedMessage{
			ExecutionID: parent.ExecutionID, ScheduledID: parent.ScheduledID,
			ChildInstanceID: in.InstanceID, Failure: f,
		}}
	}
	return d
}

func sortedIDs[V any](m map[int64]V) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// decision turns the state at the end of the turn into a Decision.
func (t *turn) decision() Decision {
	if t.fault != nil {
		return abort(t.in, *t.fault)
	}
	d := Decision{Events: t.delta}
	// Most turns cancel nothing and need neither map.
	var cancelled, scheduledNow map[int64]bool
	if slices.ContainsFunc(t.delta, func(e Event) bool { _, ok := e.(ActivityCancelRequested); return ok }) {
		cancelled, scheduledNow = map[int64]bool{}, map[int64]bool{}
		for _, e := range t.delta {
			switch x := e.(type) {
			case ActivityScheduled:
				scheduledNow[x.ID] = true
			case ActivityCancelRequested:
				cancelled[x.ScheduledID] = true
			}
		}
	}
	var forgotten map[int64]bool
	if len(t.forgotten) > 0 {
		forgotten = make(map[int64]bool, len(t.forgotten))
		for _, id := range t.forgotten {
			forgotten[id] = true
		}
		createdNow := map[int64]bool{}
		for _, e := range t.delta {
			if x, ok := e.(TimerCreated); ok {
				createdNow[x.ID] = true
			}
		}
		for _, id := range sortedIDs(forgotten) {
			if !createdNow[id] {
				d.CancelTimers = append(d.CancelTimers, TimerFiredMessage{ExecutionID: t.in.ExecutionID, TimerID: id})
			}
		}
	}
	nowMs := t.in.Now.UnixMilli()
	for _, e := range t.delta {
		switch x := e.(type) {
		case ActivityScheduled:
			if !cancelled[x.ID] {
				d.Activities = append(d.Activities, ActivityTask{ActivityID: x.ID, Name: x.Name, TaskQueue: x.TaskQueue, Input: x.Input, Attempt: x.Attempt})
			}
		case ActivityCancelRequested:
			if !scheduledNow[x.ScheduledID] {
				d.CancelActivities = append(d.CancelActivities, x.ScheduledID)
			}
		case TimerCreated:
			if forgotten[x.ID] {
				continue
			}
			d.Timers = append(d.Timers, Timer{
				TimerID: x.ID,
				Delay:   time.Duration(x.FireAt-nowMs) * time.Millisecond,
				Message: TimerFiredMessage{ExecutionID: t.in.ExecutionID, TimerID: x.ID},
			})
		case ChildScheduled:
			d.Children = append(d.Children, ChildStart{
				InstanceID: x.InstanceID, Name: x.Name, Version: x.Version, Input: x.Input,
				Message: StartMessage{Input: x.Input, Parent: &ParentRef{InstanceID: t.in.InstanceID, ExecutionID: t.in.ExecutionID, ScheduledID: x.ID}},
			})
		case ChildCancelRequested:
			d.CancelChildren = append(d.CancelChildren, Envelope{InstanceID: x.InstanceID, Message: CancelMessage{Reason: x.Reason}})
		}
	}
	d.Outcome = Outcome{Status: StatusRunning}
	if t.final == nil {
		return d
	}
	var parentMsg Message
	p := t.parent
	switch x := t.final.(type) {
	case ExecutionCompleted:
		d.Outcome = Outcome{Status: StatusCompleted, Output: x.Output}
		if p != nil {
			parentMsg = ChildCompletedMessage{ExecutionID: p.ExecutionID, ScheduledID: p.ScheduledID, ChildInstanceID: t.in.InstanceID, Result: x.Output}
		}
	case ExecutionFailed:
		f := x.Failure
		d.Outcome = Outcome{Status: StatusFailed, Failure: &f}
		if p != nil {
			parentMsg = ChildFailedMessage{ExecutionID: p.ExecutionID, ScheduledID: p.ScheduledID, ChildInstanceID: t.in.InstanceID, Failure: f}
		}
	case ExecutionCancelled:
		d.Outcome = Outcome{Status: StatusCancelled, Reason: x.Reason}
		if p != nil {
			parentMsg = ChildFailedMessage{ExecutionID: p.ExecutionID, ScheduledID: p.ScheduledID, ChildInstanceID: t.in.InstanceID,
				Failure: Failure{Kind: "cancelled", Message: "sub-orchestration cancelled: " + x.Reason}}
		}
	case ContinuedAsNew:
		d.Outcome = Outcome{Status: StatusContinuedAsNew, Next: &StartMessage{Input: x.Input, Parent: p}}
	}
	if parentMsg != nil && t.finalIsNew {
		d.ParentMessage = &Envelope{InstanceID: p.InstanceID, Message: parentMsg}
	}
	return d
}
