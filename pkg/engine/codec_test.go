package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEventCodecRoundTripsEveryKind(t *testing.T) {
	t.Parallel()
	parent := &ParentRef{InstanceID: "p", ExecutionID: 2, ScheduledID: 5}
	f := Failure{Kind: "boom", Message: "it broke", NonRetryable: true}
	events := []Event{
		ExecutionStarted{ID: 1, Name: "n", Version: "1", Input: raw(`{"a":1}`), Parent: parent},
		ActivityScheduled{ID: 2, Name: "a", TaskQueue: "q", Input: raw(`[1]`), Attempt: 3},
		ActivityCompleted{ID: 3, ScheduledID: 2, Result: raw(`"ok"`)},
		ActivityFailed{ID: 4, ScheduledID: 2, Failure: f},
		ActivityCancelRequested{ID: 5, ScheduledID: 2, Reason: "race lost"},
		TimerCreated{ID: 6, FireAt: 1767225600000, Purpose: "retry"},
		TimerFired{ID: 7, TimerID: 6},
		EventReceived{ID: 8, Name: "e", Payload: raw(`null`)},
		ChildScheduled{ID: 9, InstanceID: "c", Name: "child", Version: "2", Input: raw(`{}`)},
		ChildCompleted{ID: 10, ScheduledID: 9, Result: raw(`1.5`)},
		ChildFailed{ID: 11, ScheduledID: 9, Failure: f},
		ChildCancelRequested{ID: 12, ScheduledID: 9, InstanceID: "c", Reason: "execution cancelled"},
		CancelRequested{ID: 13, Reason: "user"},
		ContinuedAsNew{ID: 14, Input: raw(`{"n":2}`)},
		ExecutionCompleted{ID: 15, Output: raw(`true`)},
		ExecutionFailed{ID: 16, Failure: f},
		ExecutionCancelled{ID: 17, Reason: "user"},
	}
	seen := map[EventKind]bool{}
	for _, e := range events {
		kind, payload, err := EncodeEvent(e)
		require.NoError(t, err)
		require.Equal(t, string(e.Kind()), kind)
		require.Contains(t, string(payload), `{"v":1`)
		require.NotContains(t, string(payload), `"ID"`)
		back, err := DecodeEvent(e.EventID(), kind, payload)
		require.NoError(t, err)
		require.Equal(t, e, back)
		seen[e.Kind()] = true
	}
	require.Len(t, seen, 17)
}

// TestEventCodecIsStable pins the stored form: changing it breaks stored histories.
func TestEventCodecIsStable(t *testing.T) {
	t.Parallel()
	kind, payload, err := EncodeEvent(ActivityScheduled{ID: 2, Name: "charge", TaskQueue: "payments", Input: raw(`{"amount":5}`), Attempt: 1})
	require.NoError(t, err)
	require.Equal(t, "activity_scheduled", kind)
	require.Equal(t, `{"v":1,"name":"charge","task_queue":"payments","input":{"amount":5},"attempt":1}`, string(payload))
	kind, payload, err = EncodeEvent(CancelRequested{ID: 9})
	require.NoError(t, err)
	require.Equal(t, "cancel_requested", kind)
	require.Equal(t, `{"v":1}`, string(payload))
	kind, payload, err = EncodeMessage(TimerFiredMessage{ExecutionID: 3, TimerID: 7})
	require.NoError(t, err)
	require.Equal(t, "timer_fired", kind)
	require.Equal(t, `{"v":1,"execution_id":3,"timer_id":7}`, string(payload))
}

func TestMessageCodecRoundTripsEveryKind(t *testing.T) {
	t.Parallel()
	f := Failure{Kind: "k", Message: "m"}
	msgs := []Message{
		StartMessage{Input: raw(`1`), Parent: &ParentRef{InstanceID: "p", ExecutionID: 1, ScheduledID: 2}},
		ActivityCompletedMessage{ExecutionID: 1, ActivityID: 2, Attempt: 1, Result: raw(`{}`)},
		ActivityFailedMessage{ExecutionID: 1, ActivityID: 2, Attempt: 2, Failure: f},
		TimerFiredMessage{ExecutionID: 1, TimerID: 3},
		EventRaisedMessage{Name: "e", Payload: raw(`[]`)},
		ChildCompletedMessage{ExecutionID: 1, ScheduledID: 4, ChildInstanceID: "c", Result: raw(`null`)},
		ChildFailedMessage{ExecutionID: 1, ScheduledID: 4, ChildInstanceID: "c", Failure: f},
		CancelMessage{Reason: "r"},
	}
	for _, m := range msgs {
		kind, payload, err := EncodeMessage(m)
		require.NoError(t, err)
		require.Equal(t, string(m.Kind()), kind)
		back, err := DecodeMessage(kind, payload)
		require.NoError(t, err)
		require.Equal(t, m, back)
	}
}

func TestCodecErrors(t *testing.T) {
	t.Parallel()
	cases := map[string]func() error{
		"unknown event kind": func() error { _, err := DecodeEvent(1, "activity_teleported", []byte(`{"v":1}`)); return err },
		"event version":      func() error { _, err := DecodeEvent(1, "timer_fired", []byte(`{"v":2,"timer_id":1}`)); return err },
		"event no version":   func() error { _, err := DecodeEvent(1, "timer_fired", []byte(`{"timer_id":1}`)); return err },
		"event not JSON":     func() error { _, err := DecodeEvent(1, "timer_fired", []byte(`{`)); return err },
		"event wrong type":   func() error { _, err := DecodeEvent(1, "timer_fired", []byte(`{"v":1,"timer_id":"x"}`)); return err },
		"unknown message":    func() error { _, err := DecodeMessage("wake_up", []byte(`{"v":1}`)); return err },
		"message version":    func() error { _, err := DecodeMessage("cancel", []byte(`{"v":0}`)); return err },
		"nil event":          func() error { _, _, err := EncodeEvent(nil); return err },
		"nil message":        func() error { _, _, err := EncodeMessage(nil); return err },
		"event bad JSON":     func() error { _, _, err := EncodeEvent(ActivityCompleted{Result: raw(`{oops`)}); return err },
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Error(t, fn())
		})
	}
	_, err := DecodeEvent(4, "timer_fired", []byte(`{"v":2}`))
	require.EqualError(t, err, "decode timer_fired event 4: payload version 2, want 1")
}

// TestTurnSanitizesPayloads makes sure a malformed payload from outside cannot produce
// an event the codec refuses: inputs and event payloads become strings, results become
// failures, and JSON is compacted as the codec stores it.
func TestTurnSanitizesPayloads(t *testing.T) {
	t.Parallel()
	def, err := ParseDefinition([]byte(`
name: s
version: 1
steps:
  - id: e
    wait_event: { name: e }
  - id: a
    continue_on_error: true
    activity: { name: a, task_queue: q }
  - return: '${ [input, steps.e.output, steps.a.error.message] }'
`))
	require.NoError(t, err)
	d, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Now: epoch, Messages: []Message{
		StartMessage{Input: raw("{not json")},
		EventRaisedMessage{Name: "e", Payload: raw(" { \"a\" : [1, 2] } ")},
		ActivityCompletedMessage{ExecutionID: 1, ActivityID: 3, Attempt: 1, Result: raw("\xff")},
	}})
	require.NoError(t, err)
	require.Equal(t, []Event{
		ExecutionStarted{ID: 1, Name: "s", Version: "1", Input: raw(`"{not json"`)},
		EventReceived{ID: 2, Name: "e", Payload: raw(`{"a":[1,2]}`)},
		ActivityScheduled{ID: 3, Name: "a", TaskQueue: "q", Input: raw(`null`), Attempt: 1},
		ActivityFailed{ID: 4, ScheduledID: 3, Failure: Failure{Kind: "activity_failed", Message: "the activity's result is not JSON"}},
		ExecutionCompleted{ID: 5, Output: raw(`["{not json",{"a":[1,2]},"activity a failed (attempt 1 of 1): the activity's result is not JSON"]`)},
	}, d.Events)
	for _, e := range d.Events {
		_, _, err := EncodeEvent(e)
		require.NoError(t, err)
	}
}

func TestTurnRefusesAHistoryOfAnotherDefinition(t *testing.T) {
	t.Parallel()
	def, err := ParseDefinition([]byte("name: s\nversion: 2\nsteps:\n  - return: 1\n"))
	require.NoError(t, err)
	d, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Now: epoch, History: []Event{ExecutionStarted{ID: 1, Name: "s", Version: "1"}}})
	require.NoError(t, err)
	require.Equal(t, &Failure{Kind: "nondeterministic", Message: "nondeterministic history: event 1 (execution_started): the history belongs to s version 1, not s version 2"}, d.Outcome.Failure)
}
