package engine

import (
	"encoding/json"
	"fmt"
)

// MessageKind names a kind of message for an instance: the inputs of a turn, kept by the
// store in the orchestrator queue as kind + payload. The values never change.
type MessageKind string

// The message kinds.
const (
	MessageStart             MessageKind = "start"
	MessageActivityCompleted MessageKind = "activity_completed"
	MessageActivityFailed    MessageKind = "activity_failed"
	MessageTimerFired        MessageKind = "timer_fired"
	MessageEventRaised       MessageKind = "event_raised"
	MessageChildCompleted    MessageKind = "child_completed"
	MessageChildFailed       MessageKind = "child_failed"
	MessageCancel            MessageKind = "cancel"
)

// Message is one input of a turn.
type Message interface {
	Kind() MessageKind
	isMessage()
}

// StartMessage starts an execution.
type StartMessage struct {
	Input json.RawMessage `json:"input,omitempty"`
	// Parent is set when the instance is a sub-orchestration.
	Parent *ParentRef `json:"parent,omitempty"`
}

// ActivityCompletedMessage carries an activity attempt's result from a worker.
type ActivityCompletedMessage struct {
	ExecutionID int64 `json:"execution_id"`
	// ActivityID is the id of the activity_scheduled event of the attempt.
	ActivityID int64           `json:"activity_id"`
	Attempt    int             `json:"attempt"`
	Result     json.RawMessage `json:"result,omitempty"`
}

// ActivityFailedMessage carries an activity attempt's failure from a worker.
type ActivityFailedMessage struct {
	ExecutionID int64   `json:"execution_id"`
	ActivityID  int64   `json:"activity_id"`
	Attempt     int     `json:"attempt"`
	Failure     Failure `json:"failure"`
}

// TimerFiredMessage is delivered when a timer is due.
type TimerFiredMessage struct {
	ExecutionID int64 `json:"execution_id"`
	// TimerID is the id of the timer_created event.
	TimerID int64 `json:"timer_id"`
}

// EventRaisedMessage is an external event raised for the instance.
type EventRaisedMessage struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// ChildCompletedMessage tells a parent that a child completed.
type ChildCompletedMessage struct {
	// ExecutionID is the parent's execution that started the child.
	ExecutionID int64 `json:"execution_id"`
	// ScheduledID is the id of the parent's child_scheduled event.
	ScheduledID     int64           `json:"scheduled_id"`
	ChildInstanceID string          `json:"child_instance_id"`
	Result          json.RawMessage `json:"result,omitempty"`
}

// ChildFailedMessage tells a parent that a child failed or was cancelled.
type ChildFailedMessage struct {
	ExecutionID     int64   `json:"execution_id"`
	ScheduledID     int64   `json:"scheduled_id"`
	ChildInstanceID string  `json:"child_instance_id"`
	Failure         Failure `json:"failure"`
}

// CancelMessage asks the instance to cancel.
type CancelMessage struct {
	Reason string `json:"reason,omitempty"`
}

func (StartMessage) Kind() MessageKind             { return MessageStart }
func (ActivityCompletedMessage) Kind() MessageKind { return MessageActivityCompleted }
func (ActivityFailedMessage) Kind() MessageKind    { return MessageActivityFailed }
func (TimerFiredMessage) Kind() MessageKind        { return MessageTimerFired }
func (EventRaisedMessage) Kind() MessageKind       { return MessageEventRaised }
func (ChildCompletedMessage) Kind() MessageKind    { return MessageChildCompleted }
func (ChildFailedMessage) Kind() MessageKind       { return MessageChildFailed }
func (CancelMessage) Kind() MessageKind            { return MessageCancel }

func (StartMessage) isMessage()             {}
func (ActivityCompletedMessage) isMessage() {}
func (ActivityFailedMessage) isMessage()    {}
func (TimerFiredMessage) isMessage()        {}
func (EventRaisedMessage) isMessage()       {}
func (ChildCompletedMessage) isMessage()    {}
func (ChildFailedMessage) isMessage()       {}
func (CancelMessage) isMessage()            {}

// EncodeMessage returns the stored form of a message: its kind and a versioned JSON
// payload.
func EncodeMessage(m Message) (kind string, payload []byte, err error) {
	if m == nil {
		return "", nil, fmt.Errorf("encode message: nil message")
	}
	payload, err = encodePayload(m)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s message: %w", m.Kind(), err)
	}
	return string(m.Kind()), payload, nil
}

// DecodeMessage rebuilds a message from its stored kind and payload.
func DecodeMessage(kind string, payload []byte) (Message, error) {
	var zero Message
	switch MessageKind(kind) {
	case MessageStart:
		zero = StartMessage{}
	case MessageActivityCompleted:
		zero = ActivityCompletedMessage{}
	case MessageActivityFailed:
		zero = ActivityFailedMessage{}
	case MessageTimerFired:
		zero = TimerFiredMessage{}
	case MessageEventRaised:
		zero = EventRaisedMessage{}
	case MessageChildCompleted:
		zero = ChildCompletedMessage{}
	case MessageChildFailed:
		zero = ChildFailedMessage{}
	case MessageCancel:
		zero = CancelMessage{}
	default:
		return nil, fmt.Errorf("decode message: unknown kind %q", kind)
	}
	m, err := decodePayload(payload, zero)
	if err != nil {
		return nil, fmt.Errorf("decode %s message: %w", kind, err)
	}
	return m.(Message), nil
}
