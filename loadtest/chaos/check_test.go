package chaos

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// ev builds a history event; payload is encoded as JSON.
func ev(id int64, kind string, payload any) *sdk.HistoryEvent {
	b, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	return &sdk.HistoryEvent{ID: id, Kind: kind, Payload: b}
}

// timerInstance is a completed instance of the timer workload: a timer,
// then an activity.
func timerInstance() Observed {
	return Observed{ID: "timer-000001", Found: true, Status: sdk.StatusCompleted, Executions: []ObservedExecution{{
		ID: 1, Status: sdk.StatusCompleted, Events: []*sdk.HistoryEvent{
			ev(1, "execution_started", map[string]any{"name": "lt-timer", "version": "1"}),
			ev(2, "timer_created", map[string]any{"fire_at": 1000, "purpose": "timer"}),
			ev(3, "timer_fired", map[string]any{"timer_id": 2}),
			ev(4, "activity_scheduled", map[string]any{"name": "lt.echo", "task_queue": "loadtest", "attempt": 1}),
			ev(5, "activity_completed", map[string]any{"scheduled_id": 4, "result": 1}),
			ev(6, "execution_completed", map[string]any{"output": 1}),
		},
	}}}
}

var timerExpectation = Expectation{Executions: 1, Activities: 1, Timers: 1}

func TestCheckAcceptsAnIntactHistory(t *testing.T) {
	t.Parallel()
	f := Check(timerExpectation, timerInstance())
	require.Equal(t, OK, f.Verdict, "%v", f.Problems)
	require.Empty(t, f.Problems)
}

// The judge is not vacuous: each way a history can be wrong gives the
// verdict it should.
func TestCheckFindsWhatIsWrong(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		change  func(o *Observed)
		verdict Verdict
		problem string
	}{
		{"an activity completed twice", func(o *Observed) {
			h := o.Executions[0].Events
			h = slices.Insert(h, 5, ev(6, "activity_completed", map[string]any{"scheduled_id": 4, "result": 1}))
			h[6].ID = 7
			o.Executions[0].Events = h
		}, Duplicated, "activity 4 answered 2 times"},
		{"a timer fired twice", func(o *Observed) {
			h := o.Executions[0].Events
			h = slices.Insert(h, 3, ev(4, "timer_fired", map[string]any{"timer_id": 2}))
			for i := 4; i < len(h); i++ {
				h[i].ID = int64(i + 1)
			}
			h[5].Payload = json.RawMessage(`{"scheduled_id":5,"result":1}`)
			o.Executions[0].Events = h
		}, Duplicated, "timer 2 answered 2 times"},
		{"an event id repeated", func(o *Observed) {
			o.Executions[0].Events[3].ID = 3
		}, Duplicated, "event id 3 where 4 was due"},
		{"an event missing", func(o *Observed) {
			o.Executions[0].Events = slices.Delete(o.Executions[0].Events, 4, 5)
		}, Lost, "activity 4 never answered"},
		{"two terminal events", func(o *Observed) {
			o.Executions[0].Events = append(o.Executions[0].Events, ev(7, "execution_completed", map[string]any{"output": 1}))
		}, Duplicated, "2 terminal events"},
		{"a second execution", func(o *Observed) {
			o.Executions = append(o.Executions, o.Executions[0])
			o.Executions[1].ID = 2
		}, Duplicated, "2 executions, 1 expected"},
		{"an answer of nothing scheduled", func(o *Observed) {
			o.Executions[0].Events[4].Payload = json.RawMessage(`{"scheduled_id":3,"result":1}`)
		}, Duplicated, "an answer of activity 3, never scheduled"},
		{"the instance gone", func(o *Observed) { *o = Observed{ID: o.ID} }, Lost, "does not exist"},
		{"still running", func(o *Observed) {
			o.Status = sdk.StatusRunning
			o.Executions[0].Events = o.Executions[0].Events[:4]
		}, Stuck, "still Running"},
		{"failed", func(o *Observed) { o.Status = sdk.StatusFailed }, Failed, "ended Failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := timerInstance()
			tc.change(&o)
			f := Check(timerExpectation, o)
			require.Equal(t, tc.verdict, f.Verdict, "%v", f.Problems)
			require.True(t, slices.ContainsFunc(f.Problems, func(p string) bool { return strings.Contains(p, tc.problem) }),
				"%q not among %q", tc.problem, f.Problems)
		})
	}
}

// A continue-as-new chain: every execution but the last continues as new.
func TestCheckJudgesAChain(t *testing.T) {
	t.Parallel()
	exec := func(id int64, end string) ObservedExecution {
		return ObservedExecution{ID: id, Events: []*sdk.HistoryEvent{
			ev(1, "execution_started", map[string]any{"name": "lt-continue-as-new"}), ev(2, end, map[string]any{}),
		}}
	}
	chain := Observed{ID: "can-1", Found: true, Status: sdk.StatusCompleted,
		Executions: []ObservedExecution{exec(1, "continued_as_new"), exec(2, "continued_as_new"), exec(3, "execution_completed")}}
	require.Equal(t, OK, Check(Expectation{Executions: 3}, chain).Verdict)

	short := chain
	short.Executions = []ObservedExecution{exec(1, "continued_as_new"), exec(2, "execution_completed")}
	f := Check(Expectation{Executions: 3}, short)
	require.Equal(t, Lost, f.Verdict, "%v", f.Problems)

	broken := chain
	broken.Executions = []ObservedExecution{exec(1, "execution_completed"), exec(2, "continued_as_new"), exec(3, "execution_completed")}
	f = Check(Expectation{Executions: 3}, broken)
	require.Equal(t, Lost, f.Verdict, "%v", f.Problems)
}
