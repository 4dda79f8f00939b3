// Package engine is Orchard's orchestration engine: the definition language, its
// validation, and the deterministic replay that turns an execution's history and new
// messages into one turn's decision.
//
// # What it must never do
//
// The engine is a pure function over values. It performs no I/O, reads no clock (the
// caller passes the turn's time), uses no randomness, and starts no goroutine that
// outlives a call. It depends on nothing else in Orchard. Given the same definition,
// history, messages and time it returns the same decision, byte for byte, which is what
// makes replay safe. It must not panic on any input: definitions from tenants, histories
// from the store and messages from workers are all untrusted.
//
// # Using it
//
// At registration, [ParseDefinition] parses a YAML or JSON document, validates it
// (returning a [*ValidationError] that lists every problem by path and reason) and
// compiles its expressions; cache the [*Definition] per (name, version). For each turn
// the dispatcher decodes the execution's history with [DecodeEvent] and the fetched
// messages with [DecodeMessage], calls [Turn], and applies the [Decision] atomically:
// append [Decision.Events] (encoded with [EncodeEvent]), enqueue the activity tasks,
// timers, child starts and cancel messages, delete the worker rows of cancelled
// activities, and record the [Outcome].
//
// # The language
//
// The types of language.go are the language as written: documents decode into them
// (decode.go), keys that name no field included as errors, and the JSON Schema in
// docs/definition.schema.json is generated from them (schema_test.go checks it is
// current and that every definition in the repository validates against it).
//
// A definition has a name, a version, a list of steps and an optional output. Steps run
// in order. Each step may have an id (so that expressions can read steps.<id>.output and
// steps.<id>.error), a condition (if), continue_on_error (record a failure in
// steps.<id>.error and go on), and exactly one action:
//
//	activity           name, task_queue, input, retry {max_attempts, initial_interval,
//	                   backoff_coefficient, max_interval}, timeout (per attempt)
//	timer              a duration: "90s", "1h30m", "2d"
//	wait_event         name, timeout: the next external event of that name; events that
//	                   arrive earlier are kept, in order
//	sub_orchestration  name, version, input, instance_id: start a child, wait for its end
//	parallel           steps run together; output is the list of their outputs; the first
//	                   failure cancels the others
//	race               steps run together; the first to finish wins and the others are
//	                   cancelled; output is {index, id, output} of the winner
//	for_each           items, steps, concurrency (default 1): steps run for each item,
//	                   which they read as item and index; output is the list of each
//	                   iteration's last output
//	set                variables to assign, read later as vars.<name>
//	fail               a message: fail the execution
//	continue_as_new    input: end this execution and start the next with that input
//	return             a value: complete the execution with that output
//
// Strings may hold ${ ... } expressions in CEL over input, vars, steps, instance (id,
// execution_id, name, version, parent) and, inside for_each, item and index. A string
// that is one expression takes its value, of any JSON type; text mixed with expressions
// renders as a string. Expressions are compiled once, evaluated with a cost limit
// ([MaxExpressionCost]), and an evaluation error fails the execution with a message
// naming the expression and where it is.
//
// Documents are read as YAML 1.2 (so no and n stay strings). In YAML, quote an
// expression that contains ": " or " #", or that sits in a flow collection ({ } or [ ]).
// Durations are Go durations ("90s", "1h30m") or whole days ("2d"). A step whose if is
// false leaves steps.<id> with skipped: true and a null output. A child's instance id,
// when the step gives none, is "<parent id>:<execution id>:<event id>". Events not yet
// consumed when an execution continues as new are not carried over.
//
// A complete example: charge a card, racing the payment against a timeout, then wait
// up to two days for an approval event and ship.
//
//	name: order
//	version: 1
//	steps:
//	  - id: payment
//	    race:
//	      - id: charged
//	        activity:
//	          name: charge-card
//	          task_queue: payments
//	          input: { order: "${ input.order_id }", amount: "${ input.amount }" }
//	          retry: { max_attempts: 3, initial_interval: 2s }
//	      - id: too_slow
//	        timer: 10m
//	  - if: ${ steps.payment.output.id == "too_slow" }
//	    fail: payment of order ${ input.order_id } took too long
//	  - id: approval
//	    continue_on_error: true
//	    wait_event: { name: approved, timeout: 2d }
//	  - if: ${ steps.approval.error != null }
//	    fail: order ${ input.order_id } was not approved
//	  - id: shipment
//	    activity: { name: ship, task_queue: warehouse, input: "${ input }" }
//	output:
//	  receipt: ${ steps.payment.output.output }
//	  tracking: ${ steps.shipment.output.tracking }
//
// # History and messages
//
// A turn appends events to the execution's history: each has an id (1, 2, 3, ... within
// the execution) and a kind (the Kind* constants); completions name the id of the event
// that scheduled them, and an activity's id is the id of its activity_scheduled event.
// Replay runs the definition again over the history: an event the definition does not
// produce at that point, or a completion of nothing outstanding, fails the execution with
// a "nondeterministic history" failure naming the event. Messages (the Message*
// constants) are the turn's inputs; duplicates and late results for cancelled work are
// ignored. Retries wait on durable timers, and a cancel message cancels the execution,
// its outstanding activities and its running children.
package engine
