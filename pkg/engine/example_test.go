package engine_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orchardhq/orchard/pkg/engine"
)

// A dispatcher's turn: parse the definition once, then for each fetched batch of
// messages run Turn over the history and apply the decision.
func ExampleTurn() {
	def, err := engine.ParseDefinition([]byte(`
name: greet
version: 1
steps:
  - id: hello
    activity: { name: say-hello, task_queue: greetings, input: "${ input.who }" }
  - return: "${ steps.hello.output }"
`))
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

	// First turn: the start message schedules the activity.
	first, err := engine.Turn(def, engine.TurnInput{
		InstanceID: "greet-1", ExecutionID: 1, Now: now,
		Messages: []engine.Message{engine.StartMessage{Input: json.RawMessage(`{"who":"Ada"}`)}},
	})
	if err != nil {
		panic(err)
	}
	task := first.Activities[0]
	fmt.Println(first.Outcome.Status, task.ActivityID, task.Name, string(task.Input))

	// Second turn: the worker's result completes the execution.
	second, err := engine.Turn(def, engine.TurnInput{
		InstanceID: "greet-1", ExecutionID: 1, Now: now.Add(time.Second),
		History: first.Events,
		Messages: []engine.Message{engine.ActivityCompletedMessage{
			ExecutionID: 1, ActivityID: task.ActivityID, Attempt: task.Attempt, Result: json.RawMessage(`"Hello, Ada"`),
		}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(second.Outcome.Status, string(second.Outcome.Output))
	for _, e := range append(first.Events, second.Events...) {
		kind, payload, _ := engine.EncodeEvent(e)
		fmt.Println(e.EventID(), kind, string(payload))
	}
	// Output:
	// Running 2 say-hello "Ada"
	// Completed "Hello, Ada"
	// 1 execution_started {"v":1,"name":"greet","version":"1","input":{"who":"Ada"}}
	// 2 activity_scheduled {"v":1,"name":"say-hello","task_queue":"greetings","input":"Ada","attempt":1}
	// 3 activity_completed {"v":1,"scheduled_id":2,"result":"Hello, Ada"}
	// 4 execution_completed {"v":1,"output":"Hello, Ada"}
}

// Validation reports every problem with its path.
func ExampleParseDefinition() {
	_, err := engine.ParseDefinition([]byte(`
name: broken
version: 1
steps:
  - race:
      - timer: 10 parsecs
      - wait_event: { name: go, timeout: soon }
  - return: ${ steps.nowhere.output }
`))
	var invalid *engine.ValidationError
	if errors.As(err, &invalid) {
		for _, fe := range invalid.Errors {
			fmt.Println(fe.Path + ": " + fe.Reason)
		}
	}
	// Output:
	// steps[0].race[0].timer: "10 parsecs" is not a duration
	// steps[0].race[1].wait_event.timeout: "soon" is not a duration
	// steps[1].return: unknown step id "nowhere"
}
