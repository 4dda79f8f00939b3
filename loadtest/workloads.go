package loadtest

import (
	"context"
	"fmt"
	"time"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// TaskQueue is the task queue of the load test's activities, and
// EchoActivity the one activity its workers run: it returns its input.
const (
	TaskQueue    = "loadtest"
	EchoActivity = "lt.echo"
)

// definitions are the load test's orchestration definitions, registered in
// every tenant. A workload's parameters (width, generations, timer) travel
// in the input, so one definition serves every plan.
var definitions = map[Kind]string{
	KindOneActivity: `
name: lt-one-activity
version: "1"
steps:
  - id: a
    activity: { name: lt.echo, task_queue: loadtest, input: "${ input }" }
  - return: ${ steps.a.output }
`,
	KindFanOut: `
name: lt-fan-out
version: "1"
steps:
  - id: all
    for_each:
      items: ${ input.items }
      concurrency: 1000
      steps:
        - activity: { name: lt.echo, task_queue: loadtest, input: "${ item }" }
  - return: ${ size(steps.all.output) }
`,
	KindContinueAsNew: `
name: lt-continue-as-new
version: "1"
steps:
  - if: ${ input.n + 1 < input.generations }
    continue_as_new: { input: { n: "${ input.n + 1 }", generations: "${ input.generations }" } }
  - return: ${ input.n }
`,
	KindTimer: `
name: lt-timer
version: "1"
steps:
  - timer: ${ input.timer }
  - id: a
    activity: { name: lt.echo, task_queue: loadtest, input: 1 }
  - return: ${ steps.a.output }
`,
	KindEvent: `
name: lt-event
version: "1"
steps:
  - id: ev
    wait_event: { name: go }
  - return: ${ steps.ev.output }
`,
	KindSubOrchestration: `
name: lt-sub-orchestration
version: "1"
steps:
  - id: child
    sub_orchestration: { name: lt-one-activity, version: "1", instance_id: "${ instance.id + '-child' }", input: "${ input }" }
  - return: ${ steps.child.output }
`,
}

// definitionName is the name of a kind's definition.
func definitionName(k Kind) string { return "lt-" + string(k) }

// input is what a load's orchestrations start with.
func (l *LoadPlan) input(seq int64) any {
	switch l.Kind {
	case KindFanOut:
		items := make([]int, l.Width)
		for i := range items {
			items[i] = i
		}
		return map[string]any{"items": items}
	case KindContinueAsNew:
		return map[string]any{"n": 0, "generations": l.Generations}
	case KindTimer:
		return map[string]any{"timer": time.Duration(l.Timer).String()}
	default:
		return map[string]any{"seq": seq}
	}
}

// Start starts the load's seq-th orchestration: its definition, with the
// input its parameters give (opts may add an instance id, tags...).
func (l *LoadPlan) Start(ctx context.Context, c *sdk.Client, seq int64, opts ...sdk.StartOption) (string, error) {
	return c.Start(ctx, definitionName(l.Kind), l.input(seq), append([]sdk.StartOption{sdk.WithVersion("1")}, opts...)...)
}

// ChildID is the instance id of the child a sub-orchestration load's
// instance starts.
func ChildID(parent string) string { return parent + "-child" }

// runOne runs one orchestration of the load to its end: start, the
// client's part (an event), wait. It returns the failure's code, or "" when
// the orchestration completed. A failure after the start is a startedError:
// the server runs the orchestration all the same.
func (l *LoadPlan) runOne(ctx context.Context, c *sdk.Client, seq int64) error {
	id, err := l.Start(ctx, c, seq)
	if err != nil {
		return err
	}
	if l.Kind == KindEvent {
		if err := c.RaiseEvent(ctx, id, "go", seq); err != nil {
			return &startedError{err}
		}
	}
	in, err := c.Wait(ctx, id)
	if err != nil {
		return &startedError{err}
	}
	if in.Status != sdk.StatusCompleted {
		return &startedError{&endedError{status: string(in.Status)}}
	}
	return nil
}

// startedError is a failure of an orchestration that started: a refused or
// failed wait, an end other than Completed.
type startedError struct{ err error }

func (e *startedError) Error() string { return e.err.Error() }
func (e *startedError) Unwrap() error { return e.err }

// endedError: an orchestration ended, but not Completed.
type endedError struct{ status string }

func (e *endedError) Error() string { return fmt.Sprintf("orchestration ended %s", e.status) }
