package chaos

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/orchardhq/orchard/loadtest"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/sdk"
)

// Verdict is the judgement of one instance.
type Verdict string

// The verdicts, from the worst: an instance with a duplicated event is
// duplicated even if it is also stuck.
const (
	// Duplicated: an instance, execution or event that happened once
	// appears twice (an activity completed twice, two terminal events, an
	// instance nobody started).
	Duplicated Verdict = "duplicated"
	// Lost: an instance the API acknowledged is gone, or its history
	// misses something that happened (an event id, an activity's result,
	// an execution).
	Lost Verdict = "lost"
	// Failed: the instance ended, but not Completed (the workloads cannot fail).
	Failed Verdict = "failed"
	// Stuck: the instance had not ended when the campaign stopped waiting.
	Stuck Verdict = "stuck"
	// OK: completed once, history intact.
	OK Verdict = "ok"
)

// verdictOrder ranks verdicts, the worst first.
var verdictOrder = []Verdict{Duplicated, Lost, Failed, Stuck, OK}

// Expectation is what a completed instance of a workload holds.
type Expectation struct {
	// Executions: 1, or a continue-as-new chain's generations.
	Executions int
	// Activities and Timers scheduled, all executions together.
	Activities, Timers int
	// Children are the ids of the child instances it starts.
	Children []string
}

// expectationOf is what an instance id of load l holds; ok is false for a
// workload the campaign cannot judge.
func expectationOf(l *loadtest.LoadPlan, id string) (exp Expectation, ok bool) {
	switch l.Kind {
	case loadtest.KindOneActivity:
		return Expectation{Executions: 1, Activities: 1}, true
	case loadtest.KindFanOut:
		return Expectation{Executions: 1, Activities: l.Width}, true
	case loadtest.KindTimer:
		return Expectation{Executions: 1, Activities: 1, Timers: 1}, true
	case loadtest.KindContinueAsNew:
		return Expectation{Executions: max(l.Generations, 1)}, true
	case loadtest.KindSubOrchestration:
		return Expectation{Executions: 1, Children: []string{loadtest.ChildID(id)}}, true
	}
	// An event load raises its event once per start: a raise retried
	// across a fault may land twice, which the judge could not tell from a
	// duplicate.
	return Expectation{}, false
}

// childExpectation is what the child of a sub-orchestration holds (the
// one-activity workload).
var childExpectation = Expectation{Executions: 1, Activities: 1}

// Observed is what the API shows of an instance after the campaign.
type Observed struct {
	ID string
	// Found: the instance exists.
	Found  bool
	Status sdk.Status
	// Executions in id order, each with its whole history.
	Executions []ObservedExecution
}

// ObservedExecution is one execution and its history.
type ObservedExecution struct {
	ID     int64
	Status sdk.Status
	Events []*sdk.HistoryEvent
}

// Finding is the judgement of one instance, with what is wrong with it.
type Finding struct {
	Instance string  `json:"instance"`
	Verdict  Verdict `json:"verdict"`
	// Problems say what is wrong, each with the verdict it implies.
	Problems []string `json:"problems,omitempty"`
}

// judge gathers problems and keeps the worst verdict.
type judge struct {
	f Finding
}

func (j *judge) add(v Verdict, format string, args ...any) {
	j.f.Problems = append(j.f.Problems, fmt.Sprintf("%s: %s", v, fmt.Sprintf(format, args...)))
	if slices.Index(verdictOrder, v) < slices.Index(verdictOrder, j.f.Verdict) {
		j.f.Verdict = v
	}
}

// Check judges one instance against what its workload holds: it ended
// Completed; its executions are 1..n, as many as expected; each history's
// event ids are 1..m without a gap or a repeat; each opens with one
// execution_started and ends with one terminal event (continued_as_new
// before the last execution, execution_completed at the last); every
// activity, timer and child it scheduled was answered exactly once, and
// no answer names something never scheduled; and it scheduled as many
// activities, timers and children as the workload does.
func Check(exp Expectation, obs Observed) Finding {
	j := judge{f: Finding{Instance: obs.ID, Verdict: OK}}
	if !obs.Found {
		j.add(Lost, "the instance does not exist")
		return j.f
	}
	completed := obs.Status == sdk.StatusCompleted
	switch {
	case completed:
	case obs.Status.Terminal():
		j.add(Failed, "ended %s", obs.Status)
	default:
		j.add(Stuck, "still %s", obs.Status)
	}
	var activities, timers int
	var children []string
	for i, ex := range obs.Executions {
		if want := int64(i + 1); ex.ID != want {
			v := Lost
			if ex.ID < want {
				v = Duplicated
			}
			j.add(v, "execution %d where %d was due", ex.ID, want)
		}
		last := i == len(obs.Executions)-1
		a, t, c := checkHistory(&j, ex, last, completed)
		activities, timers, children = activities+a, timers+t, append(children, c...)
	}
	if n := len(obs.Executions); n > exp.Executions {
		j.add(Duplicated, "%d executions, %d expected", n, exp.Executions)
	} else if n < exp.Executions && completed {
		j.add(Lost, "%d executions, %d expected", n, exp.Executions)
	}
	count := func(what string, got, want int) {
		if got > want {
			j.add(Duplicated, "%d %s scheduled, %d expected", got, what, want)
		} else if got < want && completed {
			j.add(Lost, "%d %s scheduled, %d expected", got, what, want)
		}
	}
	count("activities", activities, exp.Activities)
	count("timers", timers, exp.Timers)
	count("children", len(children), len(exp.Children))
	for _, c := range exp.Children {
		if n := countOf(children, c); n > 1 {
			j.add(Duplicated, "child %s scheduled %d times", c, n)
		} else if n == 0 && completed {
			j.add(Lost, "child %s never scheduled", c)
		}
	}
	return j.f
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// answered counts the answers of what an execution scheduled, by the
// scheduling event's id.
type answered struct {
	what      string
	scheduled []int64
	answers   map[int64]int
}

func newAnswered(what string) *answered { return &answered{what: what, answers: map[int64]int{}} }

// judge reports the answers given twice, those of something never
// scheduled, and, once the execution ended, those never given.
func (a *answered) judge(j *judge, exec int64, ended bool) {
	for id, n := range a.answers {
		if !slices.Contains(a.scheduled, id) {
			j.add(Duplicated, "execution %d: an answer of %s %d, never scheduled", exec, a.what, id)
		} else if n > 1 {
			j.add(Duplicated, "execution %d: %s %d answered %d times", exec, a.what, id, n)
		}
	}
	for _, id := range a.scheduled {
		if a.answers[id] == 0 && ended {
			j.add(Lost, "execution %d: %s %d never answered", exec, a.what, id)
		}
	}
}

// checkHistory checks one execution's history and returns what it
// scheduled.
func checkHistory(j *judge, ex ObservedExecution, last, completed bool) (activities, timers int, children []string) {
	acts, tims, kids := newAnswered("activity"), newAnswered("timer"), newAnswered("child")
	var starts, ends int
	var endKind engine.EventKind
	for i, e := range ex.Events {
		if want := int64(i + 1); e.ID != want {
			v := Lost
			if e.ID < want {
				v = Duplicated
			}
			j.add(v, "execution %d: event id %d where %d was due", ex.ID, e.ID, want)
		}
		kind := engine.EventKind(e.Kind)
		var p struct {
			ScheduledID int64  `json:"scheduled_id"`
			TimerID     int64  `json:"timer_id"`
			InstanceID  string `json:"instance_id"`
		}
		if err := json.Unmarshal(e.Payload, &p); len(e.Payload) > 0 && err != nil {
			j.add(Lost, "execution %d: event %d (%s): payload does not decode: %v", ex.ID, e.ID, e.Kind, err)
		}
		switch kind {
		case engine.KindExecutionStarted:
			starts++
			if i != 0 {
				j.add(Duplicated, "execution %d: execution_started at event %d", ex.ID, e.ID)
			}
		case engine.KindActivityScheduled:
			activities++
			acts.scheduled = append(acts.scheduled, e.ID)
		case engine.KindActivityCompleted, engine.KindActivityFailed:
			acts.answers[p.ScheduledID]++
		case engine.KindTimerCreated:
			timers++
			tims.scheduled = append(tims.scheduled, e.ID)
		case engine.KindTimerFired:
			tims.answers[p.TimerID]++
		case engine.KindChildScheduled:
			children = append(children, p.InstanceID)
			kids.scheduled = append(kids.scheduled, e.ID)
		case engine.KindChildCompleted, engine.KindChildFailed:
			kids.answers[p.ScheduledID]++
		case engine.KindContinuedAsNew, engine.KindExecutionCompleted, engine.KindExecutionFailed, engine.KindExecutionCancelled:
			ends++
			endKind = kind
			if i != len(ex.Events)-1 {
				j.add(Duplicated, "execution %d: %s at event %d, not the last", ex.ID, e.Kind, e.ID)
			}
		}
	}
	if starts != 1 {
		v := Lost
		if starts > 1 {
			v = Duplicated
		}
		j.add(v, "execution %d: %d execution_started events", ex.ID, starts)
	}
	ended := ends > 0
	switch {
	case ends > 1:
		j.add(Duplicated, "execution %d: %d terminal events", ex.ID, ends)
	case !last && endKind != engine.KindContinuedAsNew:
		j.add(Lost, "execution %d, not the last, does not end with continued_as_new (%q)", ex.ID, endKind)
	case last && completed && endKind != engine.KindExecutionCompleted:
		j.add(Lost, "execution %d of a completed instance does not end with execution_completed (%q)", ex.ID, endKind)
	}
	acts.judge(j, ex.ID, ended)
	tims.judge(j, ex.ID, ended)
	kids.judge(j, ex.ID, ended)
	return activities, timers, children
}
