package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func raw(s string) json.RawMessage { return json.RawMessage(s) }

const twoActivities = `
name: two
version: 1
steps:
  - id: a
    activity: { name: first, task_queue: q, input: "${ input.x }" }
  - timer: 90s
  - activity: { name: second, task_queue: q2, input: "${ steps.a.output }" }
  - sub_orchestration: { name: kid, version: 3, input: "${ vars }" }
`

const retryDoc = `
name: two
version: 1
steps:
  - activity: { name: pay, task_queue: q, timeout: 10s, retry: { max_attempts: 2, initial_interval: 5s } }
`

func started(input string) Event {
	return ExecutionStarted{ID: 1, Name: "two", Version: "1", Input: raw(input)}
}

// TestTurnDecisions states, for each action and failure path, the history and messages
// of a turn and the decision it must produce.
func TestTurnDecisions(t *testing.T) {
	t.Parallel()
	now := epoch.Add(time.Hour)
	afterFirst := []Event{
		started(`{"x":5}`),
		ActivityScheduled{ID: 2, Name: "first", TaskQueue: "q", Input: raw(`5`), Attempt: 1},
	}
	atTimer := append(append([]Event{}, afterFirst...),
		ActivityCompleted{ID: 3, ScheduledID: 2, Result: raw(`{"ok":1}`)},
		TimerCreated{ID: 4, FireAt: now.UnixMilli() + 90_000, Purpose: "timer"},
	)
	atSecond := append(append([]Event{}, atTimer...),
		TimerFired{ID: 5, TimerID: 4},
		ActivityScheduled{ID: 6, Name: "second", TaskQueue: "q2", Input: raw(`{"ok":1}`), Attempt: 1},
	)
	atChild := append(append([]Event{}, atSecond...),
		ActivityCompleted{ID: 7, ScheduledID: 6, Result: raw(`2`)},
		ChildScheduled{ID: 8, InstanceID: "i:1:8", Name: "kid", Version: "3", Input: raw(`{}`)},
	)
	cases := map[string]struct {
		doc     string
		history []Event
		msgs    []Message
		want    Decision
	}{
		"start schedules the first activity": {
			doc:  twoActivities,
			msgs: []Message{StartMessage{Input: raw(`{"x":5}`)}},
			want: Decision{
				Events:     afterFirst,
				Activities: []ActivityTask{{ActivityID: 2, Name: "first", TaskQueue: "q", Input: raw(`5`), Attempt: 1}},
				Outcome:    Outcome{Status: StatusRunning},
			},
		},
		"an activity result moves on to a timer": {
			doc:     twoActivities,
			history: afterFirst,
			msgs:    []Message{ActivityCompletedMessage{ExecutionID: 1, ActivityID: 2, Attempt: 1, Result: raw(`{"ok":1}`)}},
			want: Decision{
				Events:  atTimer[2:],
				Timers:  []Timer{{TimerID: 4, Delay: 90 * time.Second, Message: TimerFiredMessage{ExecutionID: 1, TimerID: 4}}},
				Outcome: Outcome{Status: StatusRunning},
			},
		},
		"a timer firing schedules the next activity": {
			doc:     twoActivities,
			history: atTimer,
			msgs:    []Message{TimerFiredMessage{ExecutionID: 1, TimerID: 4}},
			want: Decision{
				Events:     atSecond[4:],
				Activities: []ActivityTask{{ActivityID: 6, Name: "second", TaskQueue: "q2", Input: raw(`{"ok":1}`), Attempt: 1}},
				Outcome:    Outcome{Status: StatusRunning},
			},
		},
		"a child gets a deterministic id and a start message naming its parent": {
			doc:     twoActivities,
			history: atSecond,
			msgs:    []Message{ActivityCompletedMessage{ExecutionID: 1, ActivityID: 6, Attempt: 1, Result: raw(`2`)}},
			want: Decision{
				Events: atChild[6:],
				Children: []ChildStart{{InstanceID: "i:1:8", Name: "kid", Version: "3", Input: raw(`{}`),
					Message: StartMessage{Input: raw(`{}`), Parent: &ParentRef{InstanceID: "i", ExecutionID: 1, ScheduledID: 8}}}},
				Outcome: Outcome{Status: StatusRunning},
			},
		},
		"the child's result completes the execution": {
			doc:     twoActivities,
			history: atChild,
			msgs:    []Message{ChildCompletedMessage{ExecutionID: 1, ScheduledID: 8, ChildInstanceID: "i:1:8", Result: raw(`"kid done"`)}},
			want: Decision{
				Events:  []Event{ChildCompleted{ID: 9, ScheduledID: 8, Result: raw(`"kid done"`)}, ExecutionCompleted{ID: 10, Output: raw(`null`)}},
				Outcome: Outcome{Status: StatusCompleted, Output: raw(`null`)},
			},
		},
		"ignored: duplicate, stale execution, wrong attempt, wrong child, unknown timer": {
			doc:     twoActivities,
			history: atChild,
			msgs: []Message{
				ActivityCompletedMessage{ExecutionID: 1, ActivityID: 2, Attempt: 1, Result: raw(`"again"`)},
				ActivityFailedMessage{ExecutionID: 1, ActivityID: 6, Attempt: 1, Failure: Failure{Message: "late"}},
				ActivityCompletedMessage{ExecutionID: 2, ActivityID: 2, Attempt: 1},
				ChildCompletedMessage{ExecutionID: 1, ScheduledID: 8, ChildInstanceID: "someone-else"},
				ChildCompletedMessage{ExecutionID: 7, ScheduledID: 8, ChildInstanceID: "i:1:8"},
				TimerFiredMessage{ExecutionID: 1, TimerID: 4},
				TimerFiredMessage{ExecutionID: 1, TimerID: 99},
				StartMessage{Input: raw(`1`)},
			},
			want: Decision{Outcome: Outcome{Status: StatusRunning}},
		},
		"a failed attempt schedules a retry timer": {
			doc: retryDoc,
			history: []Event{
				started(`{}`),
				ActivityScheduled{ID: 2, Name: "pay", TaskQueue: "q", Input: raw(`null`), Attempt: 1},
				TimerCreated{ID: 3, FireAt: now.UnixMilli(), Purpose: "timeout"},
			},
			msgs: []Message{ActivityFailedMessage{ExecutionID: 1, ActivityID: 2, Attempt: 1, Failure: Failure{Message: "declined"}}},
			want: Decision{
				Events: []Event{
					ActivityFailed{ID: 4, ScheduledID: 2, Failure: Failure{Message: "declined"}},
					TimerCreated{ID: 5, FireAt: now.Add(5 * time.Second).UnixMilli(), Purpose: "retry"},
				},
				Timers: []Timer{{TimerID: 5, Delay: 5 * time.Second, Message: TimerFiredMessage{ExecutionID: 1, TimerID: 5}}},
				// The failed attempt's timeout will never matter.
				CancelTimers: []TimerFiredMessage{{ExecutionID: 1, TimerID: 3}},
				Outcome:      Outcome{Status: StatusRunning},
			},
		},
		"the retry timer schedules the next attempt": {
			doc: retryDoc,
			history: []Event{
				started(`{}`),
				ActivityScheduled{ID: 2, Name: "pay", TaskQueue: "q", Input: raw(`null`), Attempt: 1},
				TimerCreated{ID: 3, FireAt: now.UnixMilli(), Purpose: "timeout"},
				ActivityFailed{ID: 4, ScheduledID: 2, Failure: Failure{Message: "declined"}},
				TimerCreated{ID: 5, FireAt: now.UnixMilli(), Purpose: "retry"},
			},
			msgs: []Message{TimerFiredMessage{ExecutionID: 1, TimerID: 5}, TimerFiredMessage{ExecutionID: 1, TimerID: 3}},
			want: Decision{
				Events: []Event{
					TimerFired{ID: 6, TimerID: 5},
					ActivityScheduled{ID: 7, Name: "pay", TaskQueue: "q", Input: raw(`null`), Attempt: 2},
					TimerCreated{ID: 8, FireAt: now.Add(10 * time.Second).UnixMilli(), Purpose: "timeout"},
				},
				Activities: []ActivityTask{{ActivityID: 7, Name: "pay", TaskQueue: "q", Input: raw(`null`), Attempt: 2}},
				Timers:     []Timer{{TimerID: 8, Delay: 10 * time.Second, Message: TimerFiredMessage{ExecutionID: 1, TimerID: 8}}},
				Outcome:    Outcome{Status: StatusRunning},
			},
		},
		"a timed-out attempt is cancelled and retried": {
			doc: retryDoc,
			history: []Event{
				started(`{}`),
				ActivityScheduled{ID: 2, Name: "pay", TaskQueue: "q", Input: raw(`null`), Attempt: 1},
				TimerCreated{ID: 3, FireAt: now.UnixMilli(), Purpose: "timeout"},
			},
			msgs: []Message{TimerFiredMessage{ExecutionID: 1, TimerID: 3}},
			want: Decision{
				Events: []Event{
					TimerFired{ID: 4, TimerID: 3},
					ActivityCancelRequested{ID: 5, ScheduledID: 2, Reason: "timeout"},
					TimerCreated{ID: 6, FireAt: now.Add(5 * time.Second).UnixMilli(), Purpose: "retry"},
				},
				CancelActivities: []int64{2},
				Timers:           []Timer{{TimerID: 6, Delay: 5 * time.Second, Message: TimerFiredMessage{ExecutionID: 1, TimerID: 6}}},
				Outcome:          Outcome{Status: StatusRunning},
			},
		},
		"the last attempt's failure fails the execution": {
			doc: retryDoc,
			history: []Event{
				started(`{}`),
				ActivityScheduled{ID: 2, Name: "pay", TaskQueue: "q", Input: raw(`null`), Attempt: 1},
				TimerCreated{ID: 3, FireAt: now.UnixMilli(), Purpose: "timeout"},
				ActivityFailed{ID: 4, ScheduledID: 2, Failure: Failure{Message: "declined"}},
				TimerCreated{ID: 5, FireAt: now.UnixMilli(), Purpose: "retry"},
				TimerFired{ID: 6, TimerID: 5},
				ActivityScheduled{ID: 7, Name: "pay", TaskQueue: "q", Input: raw(`null`), Attempt: 2},
				TimerCreated{ID: 8, FireAt: now.UnixMilli(), Purpose: "timeout"},
			},
			msgs: []Message{ActivityFailedMessage{ExecutionID: 1, ActivityID: 7, Attempt: 2, Failure: Failure{Kind: "card", Message: "declined again"}}},
			want: Decision{
				Events: []Event{
					ActivityFailed{ID: 9, ScheduledID: 7, Failure: Failure{Kind: "card", Message: "declined again"}},
					ExecutionFailed{ID: 10, Failure: Failure{Kind: "card", Message: "activity pay failed (attempt 2 of 2): declined again"}},
				},
				// The second attempt's timeout; the first's went a turn ago.
				CancelTimers: []TimerFiredMessage{{ExecutionID: 1, TimerID: 8}},
				Outcome:      Outcome{Status: StatusFailed, Failure: &Failure{Kind: "card", Message: "activity pay failed (attempt 2 of 2): declined again"}},
			},
		},
		"a wait takes the oldest kept event": {
			doc: `
name: two
version: 1
steps:
  - timer: 1m
  - id: w
    wait_event: { name: e, timeout: 1h }
  - return: "${ steps.w.output }"
`,
			history: []Event{
				started(`{}`),
				TimerCreated{ID: 2, FireAt: now.UnixMilli(), Purpose: "timer"},
				EventReceived{ID: 3, Name: "e", Payload: raw(`"first"`)},
				EventReceived{ID: 4, Name: "e", Payload: raw(`"second"`)},
			},
			msgs: []Message{TimerFiredMessage{ExecutionID: 1, TimerID: 2}},
			want: Decision{
				Events:  []Event{TimerFired{ID: 5, TimerID: 2}, ExecutionCompleted{ID: 6, Output: raw(`"first"`)}},
				Outcome: Outcome{Status: StatusCompleted, Output: raw(`"first"`)},
			},
		},
		"a for_each failure cancels the running iterations": {
			doc: `
name: two
version: 1
steps:
  - for_each:
      items: [1, 2, 3]
      concurrency: 3
      steps:
        - activity: { name: each, task_queue: q, input: "${ item * 10 }" }
`,
			history: []Event{
				started(`{}`),
				ActivityScheduled{ID: 2, Name: "each", TaskQueue: "q", Input: raw(`10`), Attempt: 1},
				ActivityScheduled{ID: 3, Name: "each", TaskQueue: "q", Input: raw(`20`), Attempt: 1},
				ActivityScheduled{ID: 4, Name: "each", TaskQueue: "q", Input: raw(`30`), Attempt: 1},
				ActivityCompleted{ID: 5, ScheduledID: 2, Result: raw(`1`)},
			},
			msgs: []Message{ActivityFailedMessage{ExecutionID: 1, ActivityID: 4, Attempt: 1, Failure: Failure{Message: "bad"}}},
			want: Decision{
				Events: []Event{
					ActivityFailed{ID: 6, ScheduledID: 4, Failure: Failure{Message: "bad"}},
					ActivityCancelRequested{ID: 7, ScheduledID: 3, Reason: "for_each iteration failed"},
					ExecutionFailed{ID: 8, Failure: Failure{Kind: "activity_failed", Message: "activity each failed (attempt 1 of 1): bad"}},
				},
				CancelActivities: []int64{3},
				Outcome:          Outcome{Status: StatusFailed, Failure: &Failure{Kind: "activity_failed", Message: "activity each failed (attempt 1 of 1): bad"}},
			},
		},
		"an event before its wait is kept in history": {
			doc:     twoActivities,
			history: afterFirst,
			msgs:    []Message{EventRaisedMessage{Name: "later", Payload: raw(`[1]`)}},
			want: Decision{
				Events:  []Event{EventReceived{ID: 3, Name: "later", Payload: raw(`[1]`)}},
				Outcome: Outcome{Status: StatusRunning},
			},
		},
		"cancel cancels outstanding activities and children": {
			doc: `
name: two
version: 1
steps:
  - parallel:
      - activity: { name: a, task_queue: q }
      - sub_orchestration: { name: kid, instance_id: k }
      - timer: 1h
`,
			msgs: []Message{StartMessage{}, CancelMessage{Reason: "user"}},
			want: Decision{
				Events: []Event{
					ExecutionStarted{ID: 1, Name: "two", Version: "1"},
					ActivityScheduled{ID: 2, Name: "a", TaskQueue: "q", Input: raw(`null`), Attempt: 1},
					ChildScheduled{ID: 3, InstanceID: "k", Name: "kid", Input: raw(`null`)},
					TimerCreated{ID: 4, FireAt: now.Add(time.Hour).UnixMilli(), Purpose: "timer"},
					CancelRequested{ID: 5, Reason: "user"},
					ActivityCancelRequested{ID: 6, ScheduledID: 2, Reason: "execution cancelled"},
					ChildCancelRequested{ID: 7, ScheduledID: 3, InstanceID: "k", Reason: "execution cancelled"},
					ExecutionCancelled{ID: 8, Reason: "user"},
				},
				// The timer was created and dropped in this turn: never queued.
				Children: []ChildStart{{InstanceID: "k", Name: "kid", Input: raw(`null`),
					Message: StartMessage{Input: raw(`null`), Parent: &ParentRef{InstanceID: "i", ExecutionID: 1, ScheduledID: 3}}}},
				CancelChildren: []Envelope{{InstanceID: "k", Message: CancelMessage{Reason: "execution cancelled"}}},
				Outcome:        Outcome{Status: StatusCancelled, Reason: "user"},
			},
		},
		"continue as new cancels outstanding work and carries the next start": {
			doc: `
name: two
version: 1
steps:
  - parallel:
      - activity: { name: a, task_queue: q }
      - continue_as_new: { input: { n: "${ input.n + 1 }" } }
`,
			history: []Event{ExecutionStarted{ID: 1, Name: "two", Version: "1", Input: raw(`{"n":1}`), Parent: &ParentRef{InstanceID: "p", ExecutionID: 2, ScheduledID: 9}}},
			want: Decision{
				Events: []Event{
					ActivityScheduled{ID: 2, Name: "a", TaskQueue: "q", Input: raw(`null`), Attempt: 1},
					ActivityCancelRequested{ID: 3, ScheduledID: 2, Reason: "continued as new"},
					ContinuedAsNew{ID: 4, Input: raw(`{"n":2}`)},
				},
				Outcome: Outcome{Status: StatusContinuedAsNew, Next: &StartMessage{Input: raw(`{"n":2}`), Parent: &ParentRef{InstanceID: "p", ExecutionID: 2, ScheduledID: 9}}},
			},
		},
		"a race won at once cancels the loser scheduled in the same turn": {
			doc: `
name: two
version: 1
steps:
  - race:
      - set: { quick: true }
      - activity: { name: slow, task_queue: q }
  - return: "${ vars.quick }"
`,
			msgs: []Message{StartMessage{}},
			want: Decision{
				Events: []Event{
					ExecutionStarted{ID: 1, Name: "two", Version: "1"},
					ActivityScheduled{ID: 2, Name: "slow", TaskQueue: "q", Input: raw(`null`), Attempt: 1},
					ActivityCancelRequested{ID: 3, ScheduledID: 2, Reason: "race lost"},
					ExecutionCompleted{ID: 4, Output: raw(`true`)},
				},
				Outcome: Outcome{Status: StatusCompleted, Output: raw(`true`)},
			},
		},
		"a race won by its activity withdraws the losing timer, and the run goes on": {
			doc: `
name: two
version: 1
steps:
  - race:
      - activity: { name: quick, task_queue: q }
      - timer: 48h
  - activity: { name: next, task_queue: q }
`,
			history: []Event{
				started(`{}`),
				ActivityScheduled{ID: 2, Name: "quick", TaskQueue: "q", Input: raw(`null`), Attempt: 1},
				TimerCreated{ID: 3, FireAt: now.Add(48 * time.Hour).UnixMilli(), Purpose: "timer"},
			},
			msgs: []Message{ActivityCompletedMessage{ExecutionID: 1, ActivityID: 2, Attempt: 1, Result: raw(`1`)}},
			want: Decision{
				Events: []Event{
					ActivityCompleted{ID: 4, ScheduledID: 2, Result: raw(`1`)},
					ActivityScheduled{ID: 5, Name: "next", TaskQueue: "q", Input: raw(`null`), Attempt: 1},
				},
				Activities:   []ActivityTask{{ActivityID: 5, Name: "next", TaskQueue: "q", Input: raw(`null`), Attempt: 1}},
				CancelTimers: []TimerFiredMessage{{ExecutionID: 1, TimerID: 3}},
				Outcome:      Outcome{Status: StatusRunning},
			},
		},
		"a failing child execution tells its parent": {
			doc: `
name: two
version: 1
steps:
  - fail: "no ${ input }"
`,
			msgs: []Message{StartMessage{Input: raw(`"way"`), Parent: &ParentRef{InstanceID: "p", ExecutionID: 4, ScheduledID: 6}}},
			want: Decision{
				Events: []Event{
					ExecutionStarted{ID: 1, Name: "two", Version: "1", Input: raw(`"way"`), Parent: &ParentRef{InstanceID: "p", ExecutionID: 4, ScheduledID: 6}},
					ExecutionFailed{ID: 2, Failure: Failure{Kind: "fail", Message: "no way"}},
				},
				ParentMessage: &Envelope{InstanceID: "p", Message: ChildFailedMessage{ExecutionID: 4, ScheduledID: 6, ChildInstanceID: "i", Failure: Failure{Kind: "fail", Message: "no way"}}},
				Outcome:       Outcome{Status: StatusFailed, Failure: &Failure{Kind: "fail", Message: "no way"}},
			},
		},
		"a completing child execution tells its parent": {
			doc:  "name: two\nversion: 1\nsteps:\n  - return: 42\n",
			msgs: []Message{StartMessage{Parent: &ParentRef{InstanceID: "p", ExecutionID: 1, ScheduledID: 2}}},
			want: Decision{
				Events: []Event{
					ExecutionStarted{ID: 1, Name: "two", Version: "1", Parent: &ParentRef{InstanceID: "p", ExecutionID: 1, ScheduledID: 2}},
					ExecutionCompleted{ID: 2, Output: raw(`42`)},
				},
				ParentMessage: &Envelope{InstanceID: "p", Message: ChildCompletedMessage{ExecutionID: 1, ScheduledID: 2, ChildInstanceID: "i", Result: raw(`42`)}},
				Outcome:       Outcome{Status: StatusCompleted, Output: raw(`42`)},
			},
		},
		"an expression error fails the execution and names the expression": {
			doc:  twoActivities,
			msgs: []Message{StartMessage{Input: raw(`{"y":5}`)}},
			want: Decision{
				Events: []Event{
					ExecutionStarted{ID: 1, Name: "two", Version: "1", Input: raw(`{"y":5}`)},
					ExecutionFailed{ID: 2, Failure: Failure{Kind: "expression", Message: "steps[0].activity.input: ${ input.x }: no such key: x"}},
				},
				Outcome: Outcome{Status: StatusFailed, Failure: &Failure{Kind: "expression", Message: "steps[0].activity.input: ${ input.x }: no such key: x"}},
			},
		},
		"an expression over its cost limit fails the execution": {
			doc:  "name: two\nversion: 1\nsteps:\n  - return: \"${ input.map(a, input.map(b, input.map(c, a + b + c))) }\"\n",
			msgs: []Message{StartMessage{Input: mustJSON(t, make([]int, 100))}},
			want: Decision{
				Events: []Event{
					ExecutionStarted{ID: 1, Name: "two", Version: "1", Input: mustJSON(t, make([]int, 100))},
					ExecutionFailed{ID: 2, Failure: Failure{Kind: "expression", Message: "steps[0].return: ${ input.map(a, input.map(b, input.map(c, a + b + c))) }: operation cancelled: actual cost limit exceeded"}},
				},
				Outcome: Outcome{Status: StatusFailed, Failure: &Failure{Kind: "expression", Message: "steps[0].return: ${ input.map(a, input.map(b, input.map(c, a + b + c))) }: operation cancelled: actual cost limit exceeded"}},
			},
		},
		"a history of a finished execution decides nothing more": {
			doc:     "name: two\nversion: 1\nsteps:\n  - return: 1\n",
			history: []Event{ExecutionStarted{ID: 1, Name: "two", Version: "1", Parent: &ParentRef{InstanceID: "p", ExecutionID: 1, ScheduledID: 2}}, ExecutionCompleted{ID: 2, Output: raw(`1`)}},
			msgs:    []Message{EventRaisedMessage{Name: "late"}, CancelMessage{}},
			want:    Decision{Outcome: Outcome{Status: StatusCompleted, Output: raw(`1`)}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			def, err := ParseDefinition([]byte(tc.doc))
			require.NoError(t, err)
			got, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, History: tc.history, Messages: tc.msgs, Now: now})
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestTurnNondeterministicHistory feeds histories the definition cannot have produced.
func TestTurnNondeterministicHistory(t *testing.T) {
	t.Parallel()
	def, err := ParseDefinition([]byte(twoActivities))
	require.NoError(t, err)
	cases := map[string]struct {
		history []Event
		message string
		cancels []int64
	}{
		"wrong kind at an event id": {
			history: []Event{started(`{"x":1}`), TimerCreated{ID: 2, Purpose: "timer"}},
			message: `nondeterministic history: event 2 (timer_created): the definition produces activity_scheduled "first" attempt 1 here`,
		},
		"wrong activity name": {
			history: []Event{started(`{"x":1}`), ActivityScheduled{ID: 2, Name: "other", TaskQueue: "q", Attempt: 1}},
			message: `nondeterministic history: event 2 (activity_scheduled): the definition produces activity_scheduled "first" attempt 1 here`,
			cancels: []int64{2},
		},
		"unknown completion": {
			history: []Event{started(`{"x":1}`), ActivityScheduled{ID: 2, Name: "first", TaskQueue: "q", Attempt: 1}, ActivityCompleted{ID: 3, ScheduledID: 9}},
			message: "nondeterministic history: event 3 (activity_completed): it answers nothing outstanding",
			cancels: []int64{2},
		},
		"a decision the definition does not make": {
			history: []Event{started(`{"x":1}`), ActivityScheduled{ID: 2, Name: "first", TaskQueue: "q", Attempt: 1}, ActivityScheduled{ID: 3, Name: "first", TaskQueue: "q", Attempt: 1}},
			message: "nondeterministic history: event 3 (activity_scheduled): the definition does not produce it at this point",
			cancels: []int64{2, 3},
		},
		"an event id out of sequence": {
			history: []Event{started(`{"x":1}`), ActivityScheduled{ID: 3, Name: "first", TaskQueue: "q", Attempt: 1}},
			message: "nondeterministic history: history position 2 holds activity_scheduled event 3, want event id 2",
			cancels: []int64{3},
		},
		"a history that does not start": {
			history: []Event{ActivityScheduled{ID: 1, Name: "first", TaskQueue: "q", Attempt: 1}},
			message: "nondeterministic history: event 1 (activity_scheduled): the definition does not produce it at this point",
			cancels: []int64{1},
		},
		"events after the end": {
			history: []Event{started(`{}`), ExecutionFailed{ID: 2}, EventReceived{ID: 3, Name: "x"}},
			message: "nondeterministic history: event 3 (event_received): it follows the end of the execution",
		},
		"a pointer event": {
			history: []Event{started(`{}`), &TimerFired{ID: 2, TimerID: 1}},
			message: "nondeterministic history: history position 2 holds a *engine.TimerFired (events are values, not pointers), want event id 2",
		},
		"a nil pointer event": {
			history: []Event{started(`{}`), (*TimerFired)(nil)},
			message: "nondeterministic history: history position 2 holds a *engine.TimerFired (events are values, not pointers), want event id 2",
		},
		"a nil event": {
			history: []Event{started(`{}`), nil},
			message: "nondeterministic history: history position 2 holds nil, want event id 2",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, History: tc.history, Messages: []Message{CancelMessage{}}, Now: epoch})
			require.NoError(t, err)
			f := Failure{Kind: "nondeterministic", Message: tc.message}
			require.Equal(t, Outcome{Status: StatusFailed, Failure: &f}, got.Outcome)
			require.Equal(t, tc.cancels, got.CancelActivities)
			last := got.Events[len(got.Events)-1]
			require.Equal(t, ExecutionFailed{ID: int64(len(tc.history) + len(tc.cancels) + 1), Failure: f}, last)
		})
	}
}

func TestTurnMisuse(t *testing.T) {
	t.Parallel()
	def, err := ParseDefinition([]byte(twoActivities))
	require.NoError(t, err)
	_, err = Turn(nil, TurnInput{InstanceID: "i", ExecutionID: 1})
	require.Error(t, err)
	_, err = Turn(def, TurnInput{ExecutionID: 1, Messages: []Message{StartMessage{}}})
	require.Error(t, err)
	_, err = Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Messages: []Message{CancelMessage{}}})
	require.ErrorIs(t, err, ErrNotStarted)
}

func TestTurnStartMessageGoesFirst(t *testing.T) {
	t.Parallel()
	def, err := ParseDefinition([]byte("name: two\nversion: 1\nsteps:\n  - id: e\n    wait_event: { name: go }\n  - return: ${ steps.e.output }\n"))
	require.NoError(t, err)
	got, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Now: epoch, Messages: []Message{
		EventRaisedMessage{Name: "go", Payload: raw(`"early"`)},
		StartMessage{},
	}})
	require.NoError(t, err)
	require.Equal(t, Outcome{Status: StatusCompleted, Output: raw(`"early"`)}, got.Outcome)
}

func TestTurnConvertsAPanicIntoAFailure(t *testing.T) {
	t.Parallel()
	// A definition value built by hand, bypassing ParseDefinition, with a step whose
	// template is missing: the engine would dereference nil.
	def := &Definition{Name: "broken", Version: "1", Steps: []Step{{Timer: &Value{}}}}
	got, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Now: epoch, Messages: []Message{StartMessage{}}})
	require.NoError(t, err)
	require.Equal(t, StatusFailed, got.Outcome.Status)
	require.Equal(t, "internal", got.Outcome.Failure.Kind)
	require.Equal(t, []Event{
		ExecutionStarted{ID: 1, Name: "broken", Version: "1"},
		ExecutionFailed{ID: 2, Failure: *got.Outcome.Failure},
	}, got.Events)
}

// TestStepScopesInsideForEach checks what steps means inside an iteration: the
// iteration's own step results over the enclosing ones.
func TestStepScopesInsideForEach(t *testing.T) {
	t.Parallel()
	def, err := ParseDefinition([]byte(`
name: scopes
version: 1
steps:
  - id: outer
    set: { a: 1 }
  - id: loop
    for_each:
      items: [10, 20]
      steps:
        - id: inner
          set: { b: "${ item }" }
        - set:
            seen: "${ [steps.outer.output.a, steps.inner.output.b, size(steps), steps.map(k, k), 'inner' in steps, has(steps.outer)] }"
            all: "${ steps }"
  - return: "${ [steps.loop.output[1].seen, 'inner' in steps, steps.loop.output[0].all.inner] }"
`))
	require.NoError(t, err)
	d, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Now: epoch, Messages: []Message{StartMessage{}}})
	require.NoError(t, err)
	require.Equal(t, Outcome{Status: StatusCompleted, Output: raw(`[[1,20,2,["inner","outer"],true,true],false,{"error":null,"output":{"b":10}}]`)}, d.Outcome)
}

func TestFailWithoutDefinition(t *testing.T) {
	t.Parallel()
	parent := &ParentRef{InstanceID: "p", ExecutionID: 2, ScheduledID: 7}
	f := Failure{Kind: "definition_missing", Message: "no definition kid version 3"}

	// Not started yet: started from the start message, then failed.
	d, err := Fail(TurnInput{InstanceID: "c", ExecutionID: 1, Messages: []Message{
		EventRaisedMessage{Name: "early"}, StartMessage{Input: raw(`{"a":1}`), Parent: parent},
	}}, "kid", "3", f)
	require.NoError(t, err)
	require.Equal(t, []Event{
		ExecutionStarted{ID: 1, Name: "kid", Version: "3", Input: raw(`{"a":1}`), Parent: parent},
		ExecutionFailed{ID: 2, Failure: f},
	}, d.Events)
	require.Equal(t, Outcome{Status: StatusFailed, Failure: &f}, d.Outcome)
	require.Equal(t, &Envelope{InstanceID: "p", Message: ChildFailedMessage{ExecutionID: 2, ScheduledID: 7, ChildInstanceID: "c", Failure: f}}, d.ParentMessage)

	// Started: outstanding work is cancelled before the failure.
	d, err = Fail(TurnInput{InstanceID: "c", ExecutionID: 1, History: []Event{
		ExecutionStarted{ID: 1, Name: "kid", Version: "3"},
		ActivityScheduled{ID: 2, Name: "a", TaskQueue: "q"},
		ChildScheduled{ID: 3, InstanceID: "c:1:3", Name: "g"},
	}}, "kid", "3", f)
	require.NoError(t, err)
	require.Equal(t, []int64{2}, d.CancelActivities)
	require.Equal(t, []Envelope{{InstanceID: "c:1:3", Message: CancelMessage{Reason: "parent execution failed"}}}, d.CancelChildren)
	require.Equal(t, ExecutionFailed{ID: 6, Failure: f}, d.Events[len(d.Events)-1])
	require.Nil(t, d.ParentMessage)

	_, err = Fail(TurnInput{InstanceID: "c", ExecutionID: 1, Messages: []Message{CancelMessage{}}}, "kid", "3", f)
	require.ErrorIs(t, err, ErrNotStarted)
}
