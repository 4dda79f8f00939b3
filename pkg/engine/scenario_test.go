package engine

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestScenarioSequence(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: seq
		version: 1
		steps:
		  - id: a
		    activity: { name: first, task_queue: q, input: "${ input.n }" }
		  - set: { total: "${ steps.a.output.echo + 1 }" }
		  - id: b
		    activity: { name: second, task_queue: q, input: { got: "${ vars.total }", who: "${ instance.id }" } }
		output: "${ [vars.total, steps.b.output.echo.got] }"
	`))
	w.start("i1", "seq", map[string]any{"n": 41})
	w.run()
	require.Equal(t, []string{
		`1 started {"n":41}`,
		`2 schedule first #1 41`,
		`3 completed 2 {"echo":41}`,
		`4 schedule second #1 {"got":42,"who":"i1"}`,
		`5 completed 4 {"echo":{"got":42,"who":"i1"}}`,
		`6 completed [42,42]`,
	}, w.summary("i1"))
	require.Equal(t, Outcome{Status: StatusCompleted, Output: json.RawMessage(`[42,42]`)}, w.outcome("i1"))
	w.checkReplay()
}

func TestScenarioRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: retry
		version: 1
		steps:
		  - activity:
		      name: flaky
		      task_queue: q
		      retry: { max_attempts: 4, initial_interval: 10s, backoff_coefficient: 3, max_interval: 60s }
	`))
	w.worker = func(task ActivityTask, _ any) reply {
		if task.Attempt < 4 {
			return reply{fail: &Failure{Kind: "boom", Message: fmt.Sprintf("attempt %d", task.Attempt)}}
		}
		return reply{result: "ok"}
	}
	w.start("r", "retry", nil)
	w.run()
	// Failures at 00:00:01, then retry timers of 10s, 30s and 60s (capped from 90s).
	require.Equal(t, []string{
		`1 started null`,
		`2 schedule flaky #1 null`,
		`3 failed 2 attempt 1`,
		`4 timer retry 00:00:11`,
		`5 fired 4`,
		`6 schedule flaky #2 null`,
		`7 failed 6 attempt 2`,
		`8 timer retry 00:00:42`,
		`9 fired 8`,
		`10 schedule flaky #3 null`,
		`11 failed 10 attempt 3`,
		`12 timer retry 00:01:43`,
		`13 fired 12`,
		`14 schedule flaky #4 null`,
		`15 completed 14 "ok"`,
		`16 completed null`,
	}, w.summary("r"))
	w.checkReplay()
}

func TestScenarioRetriesExhausted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: retry
		version: 1
		steps:
		  - activity: { name: broken, task_queue: q, retry: { max_attempts: 2, initial_interval: 1s } }
	`))
	w.worker = func(ActivityTask, any) reply { return reply{fail: &Failure{Message: "no"}} }
	w.start("r", "retry", nil)
	w.run()
	out := w.outcome("r")
	require.Equal(t, StatusFailed, out.Status)
	require.Equal(t, &Failure{Kind: "activity_failed", Message: "activity broken failed (attempt 2 of 2): no"}, out.Failure)
	w.checkReplay()
}

func TestScenarioNonRetryableFailureStopsRetries(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: retry
		version: 1
		steps:
		  - activity: { name: broken, task_queue: q, retry: { max_attempts: 5 } }
	`))
	w.worker = func(ActivityTask, any) reply {
		return reply{fail: &Failure{Kind: "invalid", Message: "bad card", NonRetryable: true}}
	}
	w.start("r", "retry", nil)
	w.run()
	require.Equal(t, []string{
		`1 started null`,
		`2 schedule broken #1 null`,
		`3 failed 2 bad card`,
		`4 failed invalid: activity broken failed (attempt 1 of 5): bad card`,
	}, w.summary("r"))
}

func TestScenarioActivityTimeoutRetries(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: timeout
		version: 1
		steps:
		  - activity: { name: slow, task_queue: q, timeout: 5s, retry: { max_attempts: 2, initial_interval: 1s } }
	`))
	w.worker = func(task ActivityTask, _ any) reply {
		if task.Attempt == 1 {
			return reply{never: true}
		}
		return reply{result: "fast"}
	}
	w.start("t", "timeout", nil)
	w.run()
	require.Equal(t, []string{
		`1 started null`,
		`2 schedule slow #1 null`,
		`3 timer timeout 00:00:05`,
		`4 fired 3`,
		`5 cancel activity 2 (timeout)`,
		`6 timer retry 00:00:06`,
		`7 fired 6`,
		`8 schedule slow #2 null`,
		`9 timer timeout 00:00:11`,
		`10 completed 8 "fast"`,
		`11 completed null`,
	}, w.summary("t"))
	require.Equal(t, []string{"t/1/2"}, w.cancelled)
	w.checkReplay()
}

const raceDoc = `
name: race
version: 1
steps:
  - id: r
    race:
      - id: pay
        activity: { name: charge, task_queue: q }
      - id: deadline
        timer: 30s
output: "${ steps.r.output }"
`

func TestScenarioRaceTimerWins(t *testing.T) {
	t.Parallel()
	w := newWorld(t, raceDoc)
	w.worker = func(ActivityTask, any) reply { return reply{result: "paid", after: time.Minute} }
	w.start("x", "race", nil)
	w.run()
	require.Equal(t, []string{
		`1 started null`,
		`2 schedule charge #1 null`,
		`3 timer timer 00:00:30`,
		`4 fired 3`,
		`5 cancel activity 2 (race lost)`,
		`6 completed {"id":"deadline","index":1,"output":null}`,
	}, w.summary("x"))
	require.Equal(t, []string{"x/1/2"}, w.cancelled)
	w.checkReplay()
}

func TestScenarioRaceActivityWins(t *testing.T) {
	t.Parallel()
	w := newWorld(t, raceDoc)
	w.worker = func(ActivityTask, any) reply { return reply{result: "paid", after: 10 * time.Second} }
	w.start("x", "race", nil)
	// The timer still fires later; the engine ignores it.
	w.run()
	require.Equal(t, []string{
		`1 started null`,
		`2 schedule charge #1 null`,
		`3 timer timer 00:00:30`,
		`4 completed 2 "paid"`,
		`5 completed {"id":"pay","index":0,"output":"paid"}`,
	}, w.summary("x"))
	require.Empty(t, w.cancelled)
	w.checkReplay()
}

func TestScenarioParallelWithOneFailure(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: par
		version: 1
		steps:
		  - parallel:
		      - activity: { name: a, task_queue: q }
		      - activity: { name: b, task_queue: q }
		      - activity: { name: c, task_queue: q }
		      - sub_orchestration: { name: child }
		  - activity: { name: never, task_queue: q }
	`), yamlDoc(`
		name: child
		version: 1
		steps:
		  - wait_event: { name: go }
	`))
	w.worker = func(task ActivityTask, _ any) reply {
		switch task.Name {
		case "b":
			return reply{fail: &Failure{Message: "b broke"}, after: 2 * time.Second}
		case "c":
			return reply{result: 1, after: time.Second}
		}
		return reply{never: true}
	}
	w.start("p", "par", nil)
	w.run()
	require.Equal(t, []string{
		`1 started null`,
		`2 schedule a #1 null`,
		`3 schedule b #1 null`,
		`4 schedule c #1 null`,
		`5 child child p:1:5 null`,
		`6 completed 4 1`,
		`7 failed 3 b broke`,
		`8 cancel activity 2 (parallel branch failed)`,
		`9 cancel child 5 p:1:5`,
		`10 failed activity_failed: activity b failed (attempt 1 of 1): b broke`,
	}, w.summary("p"))
	require.Equal(t, []string{"p/1/2"}, w.cancelled)
	require.Equal(t, StatusCancelled, w.outcome("p:1:5").Status)
	w.checkReplay()
}

func TestScenarioForEachHundredItemsTenAtATime(t *testing.T) {
	t.Parallel()
	items := make([]any, 100)
	for i := range items {
		items[i] = i
	}
	w := newWorld(t, yamlDoc(`
		name: fan
		version: 1
		steps:
		  - id: each
		    for_each:
		      items: "${ input.items }"
		      concurrency: 10
		      steps:
		        - id: sq
		          activity: { name: square, task_queue: q, input: "${ item }" }
		        - set: { last: "${ index }" }
		output: "${ steps.each.output.map(x, x.last).filter(i, i % 10 == 0) }"
	`))
	w.worker = func(task ActivityTask, input any) reply {
		return reply{result: input.(int64) * input.(int64)}
	}
	w.start("f", "fan", map[string]any{"items": items})
	w.run()
	require.Equal(t, Outcome{Status: StatusCompleted, Output: json.RawMessage(`[0,10,20,30,40,50,60,70,80,90]`)}, w.outcome("f"))
	scheduled, running, peak := 0, 0, 0
	for _, e := range w.instances["f"].history {
		switch e.(type) {
		case ActivityScheduled:
			scheduled++
			running++
			peak = max(peak, running)
		case ActivityCompleted:
			running--
		}
	}
	require.Equal(t, 100, scheduled)
	require.Equal(t, 10, peak)
	w.checkReplay()
}

func TestScenarioContinueAsNewLoop(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: loop
		version: 1
		steps:
		  - activity: { name: tick, task_queue: q, input: "${ input.n }" }
		  - if: "${ input.n < 3 }"
		    continue_as_new: { input: { n: "${ input.n + 1 }" } }
		  - return: "${ 'done at ' + string(input.n) }"
	`))
	w.start("l", "loop", map[string]any{"n": 1})
	w.run()
	inst := w.instances["l"]
	require.Equal(t, int64(3), inst.exec)
	require.Len(t, inst.archived, 2)
	require.Equal(t, []string{
		`1 started {"n":1}`,
		`2 schedule tick #1 1`,
		`3 completed 2 {"echo":1}`,
		`4 continued as new {"n":2}`,
	}, summary(inst.archived[0]))
	require.Equal(t, []string{
		`1 started {"n":3}`,
		`2 schedule tick #1 3`,
		`3 completed 2 {"echo":3}`,
		`4 completed "done at 3"`,
	}, w.summary("l"))
	w.checkReplay()
}

func TestScenarioChildFails(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: parent
		version: 1
		steps:
		  - id: kid
		    continue_on_error: true
		    sub_orchestration: { name: child, instance_id: "kid-${ input.n }", input: "${ input.n }" }
		  - return: "${ steps.kid.error }"
	`), yamlDoc(`
		name: child
		version: 1
		steps:
		  - activity: { name: work, task_queue: q, input: "${ input }" }
		  - fail: "child gave up on ${ input }"
	`))
	w.start("p", "parent", map[string]any{"n": 7})
	w.run()
	require.Equal(t, []string{
		`1 started {"n":7}`,
		`2 child child kid-7 7`,
		`3 child failed 2 fail: child gave up on 7`,
		`4 completed {"kind":"child_failed","message":"sub-orchestration child (kid-7) failed: child gave up on 7"}`,
	}, w.summary("p"))
	require.Equal(t, StatusFailed, w.outcome("kid-7").Status)
	w.checkReplay()
}

func TestScenarioEventsBeforeAndAfterTheWait(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: events
		version: 1
		steps:
		  - timer: 1m
		  - id: first
		    wait_event: { name: note }
		  - id: second
		    wait_event: { name: note }
		  - id: third
		    wait_event: { name: note }
		output: "${ [steps.first.output, steps.second.output, steps.third.output] }"
	`))
	w.start("e", "events", nil)
	w.at(10*time.Second, "e", EventRaisedMessage{Name: "note", Payload: json.RawMessage(`"early-1"`)})
	w.at(20*time.Second, "e", EventRaisedMessage{Name: "other", Payload: json.RawMessage(`"ignored"`)})
	w.at(30*time.Second, "e", EventRaisedMessage{Name: "note", Payload: json.RawMessage(`"early-2"`)})
	w.at(5*time.Minute, "e", EventRaisedMessage{Name: "note", Payload: json.RawMessage(`"late"`)})
	w.run()
	require.Equal(t, []string{
		`1 started null`,
		`2 timer timer 00:01:00`,
		`3 event note "early-1"`,
		`4 event other "ignored"`,
		`5 event note "early-2"`,
		`6 fired 2`,
		`7 event note "late"`,
		`8 completed ["early-1","early-2","late"]`,
	}, w.summary("e"))
	w.checkReplay()
}

func TestScenarioWaitEventTimeout(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: approval
		version: 1
		steps:
		  - id: ok
		    continue_on_error: true
		    wait_event: { name: approved, timeout: 1h }
		  - if: "${ steps.ok.error != null }"
		    fail: "${ steps.ok.error.message }"
	`))
	w.start("a", "approval", nil)
	w.at(2*time.Hour, "a", EventRaisedMessage{Name: "approved"})
	w.run()
	require.Equal(t, []string{
		`1 started null`,
		`2 timer event_timeout 01:00:00`,
		`3 fired 2`,
		`4 failed fail: no event "approved" within 1h0m0s`,
	}, w.summary("a"))
	w.checkReplay()
}

// TestScenarioCancelDuringEachWait cancels an instance while it waits on each kind of
// step and checks what is cancelled.
func TestScenarioCancelDuringEachWait(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		step      string
		want      []string
		cancelled []string
		child     Status
	}{
		"activity": {
			step: `activity: { name: long, task_queue: q }`,
			want: []string{
				`1 started null`, `2 schedule long #1 null`, `3 cancel requested stop`,
				`4 cancel activity 2 (execution cancelled)`, `5 cancelled stop`,
			},
			cancelled: []string{"c/1/2"},
		},
		"timer": {
			step: `timer: 1h`,
			want: []string{`1 started null`, `2 timer timer 01:00:00`, `3 cancel requested stop`, `4 cancelled stop`},
		},
		"event": {
			step: `wait_event: { name: never }`,
			want: []string{`1 started null`, `2 cancel requested stop`, `3 cancelled stop`},
		},
		"child": {
			step: `sub_orchestration: { name: sleeper }`,
			want: []string{
				`1 started null`, `2 child sleeper c:1:2 null`, `3 cancel requested stop`,
				`4 cancel child 2 c:1:2`, `5 cancelled stop`,
			},
			child: StatusCancelled,
		},
		"race": {
			step: "race: [ { activity: { name: long, task_queue: q } }, { timer: 1h } ]",
			want: []string{
				`1 started null`, `2 schedule long #1 null`, `3 timer timer 01:00:00`, `4 cancel requested stop`,
				`5 cancel activity 2 (execution cancelled)`, `6 cancelled stop`,
			},
			cancelled: []string{"c/1/2"},
		},
		"retry backoff": {
			step: `activity: { name: broken, task_queue: q, retry: { max_attempts: 3, initial_interval: 1h } }`,
			want: []string{
				`1 started null`, `2 schedule broken #1 null`, `3 failed 2 nope`, `4 timer retry 01:00:01`,
				`5 cancel requested stop`, `6 cancelled stop`,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, "name: waiter\nversion: 1\nsteps:\n  - "+tc.step+"\n", yamlDoc(`
				name: sleeper
				version: 1
				steps:
				  - timer: 1d
			`))
			w.worker = func(task ActivityTask, _ any) reply {
				if task.Name == "broken" {
					return reply{fail: &Failure{Message: "nope"}}
				}
				return reply{never: true}
			}
			w.start("c", "waiter", nil)
			w.at(30*time.Minute, "c", CancelMessage{Reason: "stop"})
			w.run()
			require.Equal(t, tc.want, w.summary("c"))
			require.Equal(t, Outcome{Status: StatusCancelled, Reason: "stop"}, w.outcome("c"))
			require.Equal(t, tc.cancelled, w.cancelled)
			if tc.child != "" {
				require.Equal(t, tc.child, w.outcome("c:1:2").Status)
			}
			w.checkReplay()
		})
	}
}

func TestScenarioCancelledChildReportsToParent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, yamlDoc(`
		name: parent
		version: 1
		steps:
		  - sub_orchestration: { name: sleeper, instance_id: kid }
	`), yamlDoc(`
		name: sleeper
		version: 1
		steps:
		  - timer: 1d
	`))
	w.start("p", "parent", nil)
	w.at(time.Minute, "kid", CancelMessage{Reason: "operator"})
	w.run()
	require.Equal(t, []string{
		`1 started null`,
		`2 child sleeper kid null`,
		`3 child failed 2 cancelled: sub-orchestration cancelled: operator`,
		`4 failed child_failed: sub-orchestration sleeper (kid) failed: sub-orchestration cancelled: operator`,
	}, w.summary("p"))
	w.checkReplay()
}
