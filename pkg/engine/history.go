package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// EventKind names a kind of history event. It is what the store keeps in the kind
// column of the history table; the values never change.
type EventKind string

// The history event kinds.
const (
	KindExecutionStarted        EventKind = "execution_started"
	KindActivityScheduled       EventKind = "activity_scheduled"
	KindActivityCompleted       EventKind = "activity_completed"
	KindActivityFailed          EventKind = "activity_failed"
	KindActivityCancelRequested EventKind = "activity_cancel_requested"
	KindTimerCreated            EventKind = "timer_created"
	KindTimerFired              EventKind = "timer_fired"
	KindEventReceived           EventKind = "event_received"
	KindChildScheduled          EventKind = "child_scheduled"
	KindChildCompleted          EventKind = "child_completed"
	KindChildFailed             EventKind = "child_failed"
	KindChildCancelRequested    EventKind = "child_cancel_requested"
	KindCancelRequested         EventKind = "cancel_requested"
	KindContinuedAsNew          EventKind = "continued_as_new"
	KindExecutionCompleted      EventKind = "execution_completed"
	KindExecutionFailed         EventKind = "execution_failed"
	KindExecutionCancelled      EventKind = "execution_cancelled"
)

// Event is one entry of an execution's history. Event ids count 1, 2, 3, ... within an
// execution; events that answer an earlier one (a completion, a timer firing) name the
// id of the event that scheduled it.
type Event interface {
	// EventID is the event's position in the execution's history, from 1.
	EventID() int64
	// Kind is the event's stored kind.
	Kind() EventKind
	setID(int64) Event
}

// Failure describes why an activity, a child, a step or an execution failed.
type Failure struct {
	// Kind classifies the failure: activity_failed, timeout, child_failed, cancelled,
	// fail (a fail step), expression, nondeterministic, or what a worker reports.
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// NonRetryable, set by a worker, stops an activity's retries.
	NonRetryable bool `json:"non_retryable,omitempty"`
}

func (f Failure) Error() string { return f.Kind + ": " + f.Message }

// ParentRef identifies the step of a parent execution that started a child.
type ParentRef struct {
	InstanceID  string `json:"instance_id"`
	ExecutionID int64  `json:"execution_id"`
	// ScheduledID is the id of the parent's child_scheduled event.
	ScheduledID int64 `json:"scheduled_id"`
}

// ExecutionStarted opens every execution's history.
type ExecutionStarted struct {
	ID      int64           `json:"-"`
	Name    string          `json:"name"`
	Version string          `json:"version"`
	Input   json.RawMessage `json:"input,omitempty"`
	Parent  *ParentRef      `json:"parent,omitempty"`
}

// ActivityScheduled records one attempt of an activity; its event id is the activity id.
type ActivityScheduled struct {
	ID        int64           `json:"-"`
	Name      string          `json:"name"`
	TaskQueue string          `json:"task_queue"`
	Input     json.RawMessage `json:"input,omitempty"`
	Attempt   int             `json:"attempt"`
}

// ActivityCompleted records the result of an activity attempt.
type ActivityCompleted struct {
	ID          int64           `json:"-"`
	ScheduledID int64           `json:"scheduled_id"`
	Result      json.RawMessage `json:"result,omitempty"`
}

// ActivityFailed records the failure of an activity attempt.
type ActivityFailed struct {
	ID          int64   `json:"-"`
	ScheduledID int64   `json:"scheduled_id"`
	Failure     Failure `json:"failure"`
}

// ActivityCancelRequested records that an outstanding activity attempt was cancelled;
// any later result for it is ignored.
type ActivityCancelRequested struct {
	ID          int64  `json:"-"`
	ScheduledID int64  `json:"scheduled_id"`
	Reason      string `json:"reason"`
}

// TimerCreated records a durable timer; its event id is the timer id.
type TimerCreated struct {
	ID int64 `json:"-"`
	// FireAt is when the timer fires, in milliseconds since the Unix epoch.
	FireAt int64 `json:"fire_at"`
	// Purpose says what the timer is for: timer, retry, timeout or event_timeout.
	Purpose string `json:"purpose"`
}

// TimerFired records that a timer fired.
type TimerFired struct {
	ID      int64 `json:"-"`
	TimerID int64 `json:"timer_id"`
}

// EventReceived records an external event, whether or not a wait_event consumed it yet.
type EventReceived struct {
	ID      int64           `json:"-"`
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// ChildScheduled records the start of a child instance.
type ChildScheduled struct {
	ID         int64           `json:"-"`
	InstanceID string          `json:"instance_id"`
	Name       string          `json:"name"`
	Version    string          `json:"version,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
}

// ChildCompleted records a child's output.
type ChildCompleted struct {
	ID          int64           `json:"-"`
	ScheduledID int64           `json:"scheduled_id"`
	Result      json.RawMessage `json:"result,omitempty"`
}

// ChildFailed records a child's failure (or cancellation).
type ChildFailed struct {
	ID          int64   `json:"-"`
	ScheduledID int64   `json:"scheduled_id"`
	Failure     Failure `json:"failure"`
}

// ChildCancelRequested records that a running child was told to cancel.
type ChildCancelRequested struct {
	ID          int64  `json:"-"`
	ScheduledID int64  `json:"scheduled_id"`
	InstanceID  string `json:"instance_id"`
	Reason      string `json:"reason"`
}

// CancelRequested records a cancel message for the instance.
type CancelRequested struct {
	ID     int64  `json:"-"`
	Reason string `json:"reason,omitempty"`
}

// ContinuedAsNew ends an execution that continues as a new one with Input.
type ContinuedAsNew struct {
	ID    int64           `json:"-"`
	Input json.RawMessage `json:"input,omitempty"`
}

// ExecutionCompleted ends an execution with its output.
type ExecutionCompleted struct {
	ID     int64           `json:"-"`
	Output json.RawMessage `json:"output,omitempty"`
}

// ExecutionFailed ends an execution with a failure.
type ExecutionFailed struct {
	ID      int64   `json:"-"`
	Failure Failure `json:"failure"`
}

// ExecutionCancelled ends a cancelled execution.
type ExecutionCancelled struct {
	ID     int64  `json:"-"`
	Reason string `json:"reason,omitempty"`
}

func (e ExecutionStarted) EventID() int64        { return e.ID }
func (e ActivityScheduled) EventID() int64       { return e.ID }
func (e ActivityCompleted) EventID() int64       { return e.ID }
func (e ActivityFailed) EventID() int64          { return e.ID }
func (e ActivityCancelRequested) EventID() int64 { return e.ID }
func (e TimerCreated) EventID() int64            { return e.ID }
func (e TimerFired) EventID() int64              { return e.ID }
func (e EventReceived) EventID() int64           { return e.ID }
func (e ChildScheduled) EventID() int64          { return e.ID }
func (e ChildCompleted) EventID() int64          { return e.ID }
func (e ChildFailed) EventID() int64             { return e.ID }
func (e ChildCancelRequested) EventID() int64    { return e.ID }
func (e CancelRequested) EventID() int64         { return e.ID }
func (e ContinuedAsNew) EventID() int64          { return e.ID }
func (e ExecutionCompleted) EventID() int64      { return e.ID }
func (e ExecutionFailed) EventID() int64         { return e.ID }
func (e ExecutionCancelled) EventID() int64      { return e.ID }

func (ExecutionStarted) Kind() EventKind        { return KindExecutionStarted }
func (ActivityScheduled) Kind() EventKind       { return KindActivityScheduled }
func (ActivityCompleted) Kind() EventKind       { return KindActivityCompleted }
func (ActivityFailed) Kind() EventKind          { return KindActivityFailed }
func (ActivityCancelRequested) Kind() EventKind { return KindActivityCancelRequested }
func (TimerCreated) Kind() EventKind            { return KindTimerCreated }
func (TimerFired) Kind() EventKind              { return KindTimerFired }
func (EventReceived) Kind() EventKind           { return KindEventReceived }
func (ChildScheduled) Kind() EventKind          { return KindChildScheduled }
func (ChildCompleted) Kind() EventKind          { return KindChildCompleted }
func (ChildFailed) Kind() EventKind             { return KindChildFailed }
func (ChildCancelRequested) Kind() EventKind    { return KindChildCancelRequested }
func (CancelRequested) Kind() EventKind         { return KindCancelRequested }
func (ContinuedAsNew) Kind() EventKind          { return KindContinuedAsNew }
func (ExecutionCompleted) Kind() EventKind      { return KindExecutionCompleted }
func (ExecutionFailed) Kind() EventKind         { return KindExecutionFailed }
func (ExecutionCancelled) Kind() EventKind      { return KindExecutionCancelled }

func (e ExecutionStarted) setID(id int64) Event        { e.ID = id; return e }
func (e ActivityScheduled) setID(id int64) Event       { e.ID = id; return e }
func (e ActivityCompleted) setID(id int64) Event       { e.ID = id; return e }
func (e ActivityFailed) setID(id int64) Event          { e.ID = id; return e }
func (e ActivityCancelRequested) setID(id int64) Event { e.ID = id; return e }
func (e TimerCreated) setID(id int64) Event            { e.ID = id; return e }
func (e TimerFired) setID(id int64) Event              { e.ID = id; return e }
func (e EventReceived) setID(id int64) Event           { e.ID = id; return e }
func (e ChildScheduled) setID(id int64) Event          { e.ID = id; return e }
func (e ChildCompleted) setID(id int64) Event          { e.ID = id; return e }
func (e ChildFailed) setID(id int64) Event             { e.ID = id; return e }
func (e ChildCancelRequested) setID(id int64) Event    { e.ID = id; return e }
func (e CancelRequested) setID(id int64) Event         { e.ID = id; return e }
func (e ContinuedAsNew) setID(id int64) Event          { e.ID = id; return e }
func (e ExecutionCompleted) setID(id int64) Event      { e.ID = id; return e }
func (e ExecutionFailed) setID(id int64) Event         { e.ID = id; return e }
func (e ExecutionCancelled) setID(id int64) Event      { e.ID = id; return e }

// PayloadVersion is the version written into every event and message payload.
const PayloadVersion = 1

// EncodeEvent returns the stored form of an event: its kind and a JSON payload carrying
// a version field. The event id is not part of the payload; the store keeps it.
func EncodeEvent(e Event) (kind string, payload []byte, err error) {
	if e == nil {
		return "", nil, fmt.Errorf("encode event: nil event")
	}
	payload, err = encodePayload(e)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s event %d: %w", e.Kind(), e.EventID(), err)
	}
	return string(e.Kind()), payload, nil
}

// DecodeEvent rebuilds an event from its id and stored kind and payload.
func DecodeEvent(id int64, kind string, payload []byte) (Event, error) {
	var e Event
	switch EventKind(kind) {
	case KindExecutionStarted:
		e = ExecutionStarted{}
	case KindActivityScheduled:
		e = ActivityScheduled{}
	case KindActivityCompleted:
		e = ActivityCompleted{}
	case KindActivityFailed:
		e = ActivityFailed{}
	case KindActivityCancelRequested:
		e = ActivityCancelRequested{}
	case KindTimerCreated:
		e = TimerCreated{}
	case KindTimerFired:
		e = TimerFired{}
	case KindEventReceived:
		e = EventReceived{}
	case KindChildScheduled:
		e = ChildScheduled{}
	case KindChildCompleted:
		e = ChildCompleted{}
	case KindChildFailed:
		e = ChildFailed{}
	case KindChildCancelRequested:
		e = ChildCancelRequested{}
	case KindCancelRequested:
		e = CancelRequested{}
	case KindContinuedAsNew:
		e = ContinuedAsNew{}
	case KindExecutionCompleted:
		e = ExecutionCompleted{}
	case KindExecutionFailed:
		e = ExecutionFailed{}
	case KindExecutionCancelled:
		e = ExecutionCancelled{}
	default:
		return nil, fmt.Errorf("decode event %d: unknown kind %q", id, kind)
	}
	ptr, err := decodePayload(payload, e)
	if err != nil {
		return nil, fmt.Errorf("decode %s event %d: %w", kind, id, err)
	}
	return ptr.(Event).setID(id), nil
}

// encodePayload marshals v and adds the version field in front.
func encodePayload(v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("payload is not a JSON object")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"v":%d`, PayloadVersion)
	if len(body) > 2 {
		b.WriteByte(',')
	}
	b.Write(body[1:])
	return b.Bytes(), nil
}

// decodePayload checks the version of payload and unmarshals it into a copy of zero,
// returning the filled value (of zero's type).
func decodePayload(payload []byte, zero any) (any, error) {
	var head struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(payload, &head); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	if head.V != PayloadVersion {
		return nil, fmt.Errorf("payload version %d, want %d", head.V, PayloadVersion)
	}
	ptr := reflect.New(reflect.TypeOf(zero))
	if err := json.Unmarshal(payload, ptr.Interface()); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	return ptr.Elem().Interface(), nil
}
