package engine

import (
	"encoding/json"
	"strings"
	"time"
)

// The types below are the definition language as it is written: ParseDefinition decodes
// a document into them (see decode.go), and the published JSON Schema is generated
// from them, so the parser and the schema cannot drift apart. Struct fields are matched
// by their json tags; `jsonschema:"required"` and the minimum and maximum of a number
// are read by both. A type with a read method reads itself; the compiled Definition
// is built from them once the whole document has read without a problem.

// definitionSpec is a whole definition.
type definitionSpec struct {
	Name    name         `json:"name" jsonschema:"required" jsonschema_description:"The definition's name; instances are started by name."`
	Version version      `json:"version" jsonschema:"required" jsonschema_description:"The version of the definition, a name or a number; registering a new version keeps the old ones for the instances that run them."`
	Steps   stepSequence `json:"steps" jsonschema:"required" jsonschema_description:"The steps, run in order."`
	Output  *Value       `json:"output,omitempty" jsonschema_description:"The execution's output when the steps run to their end, with ${ ... } expressions; null when absent."`
}

func (def *definitionSpec) read(d *decoder, path string, v any) {
	d.object(path, v, def, "a definition is an object with name, version and steps")
}

// stepSpec is one step: an optional id and condition, and exactly one action (the
// fields tagged orchard:"action").
type stepSpec struct {
	ID              *stepID    `json:"id,omitempty" jsonschema_description:"Names the step for expressions: steps.<id>.output and steps.<id>.error."`
	If              *condition `json:"if,omitempty" jsonschema_description:"Skips the step unless it is true: a boolean or a single ${ ... } expression."`
	ContinueOnError bool       `json:"continue_on_error,omitempty" jsonschema_description:"Records a failure of the step in steps.<id>.error and goes on, instead of failing the enclosing steps."`

	Activity         *activitySpec         `json:"activity,omitempty" orchard:"action" jsonschema_description:"Runs an activity on a task queue and waits for its result."`
	Timer            *durationValue        `json:"timer,omitempty" orchard:"action" jsonschema_description:"Waits on a durable timer."`
	WaitEvent        *waitEventSpec        `json:"wait_event,omitempty" orchard:"action" jsonschema_description:"Waits for the next external event of a name."`
	SubOrchestration *subOrchestrationSpec `json:"sub_orchestration,omitempty" orchard:"action" jsonschema_description:"Starts a child instance and waits for its end."`
	Parallel         *branches             `json:"parallel,omitempty" orchard:"action" jsonschema_description:"Runs every branch at once and waits for all; the output is the list of their outputs."`
	Race             *raceBranches         `json:"race,omitempty" orchard:"action" jsonschema_description:"Runs every branch at once; the first to end wins and the others are cancelled."`
	ForEach          *forEachSpec          `json:"for_each,omitempty" orchard:"action" jsonschema_description:"Runs steps once per item of a list."`
	Set              *variables            `json:"set,omitempty" orchard:"action" jsonschema_description:"Sets variables (vars.<name>) from values and expressions."`
	Fail             *message              `json:"fail,omitempty" orchard:"action" jsonschema_description:"Fails the enclosing steps with a message."`
	ContinueAsNew    *continueAsNewSpec    `json:"continue_as_new,omitempty" orchard:"action" jsonschema:"nullable" jsonschema_description:"Ends the execution and starts the next one of the same instance with a new input."`
	Return           *Value                `json:"return,omitempty" orchard:"action" jsonschema_description:"Ends the execution with this output."`

	path string
}

// activitySpec schedules an activity.
type activitySpec struct {
	Name      name           `json:"name" jsonschema:"required" jsonschema_description:"The activity's name, as workers register it."`
	TaskQueue name           `json:"task_queue" jsonschema:"required" jsonschema_description:"The task queue whose workers run the activity."`
	Input     Value          `json:"input,omitempty" jsonschema_description:"The activity's input, with ${ ... } expressions."`
	Timeout   *durationValue `json:"timeout,omitempty" jsonschema_description:"Bounds each attempt; a timed-out attempt counts as a retryable failure."`
	Retry     *retrySpec     `json:"retry,omitempty" jsonschema_description:"How failed attempts are retried; without it an activity runs once."`
}

// retrySpec is an activity's retry policy; absent fields take RetryPolicy's defaults.
type retrySpec struct {
	MaxAttempts        *int      `json:"max_attempts,omitempty" jsonschema:"minimum=1,maximum=1000" jsonschema_description:"Attempts in all, the first included (default 1)."`
	InitialInterval    *interval `json:"initial_interval,omitempty" jsonschema_description:"The wait after the first failure (default 1s)."`
	BackoffCoefficient *float64  `json:"backoff_coefficient,omitempty" jsonschema:"minimum=1,maximum=100" jsonschema_description:"What each further wait is multiplied by (default 2)."`
	MaxInterval        *interval `json:"max_interval,omitempty" jsonschema_description:"The longest wait (default 100 times initial_interval)."`
}

func (r *retrySpec) read(d *decoder, path string, v any) {
	if !d.object(path, v, r, "must be an object") || r.MaxInterval == nil || *r.MaxInterval == 0 {
		return
	}
	initial := time.Second
	if r.InitialInterval != nil {
		initial = time.Duration(*r.InitialInterval)
	}
	if initial != 0 && time.Duration(*r.MaxInterval) < initial {
		d.errorf(join(path, "max_interval"), "is shorter than initial_interval")
	}
}

// policy returns the retry policy the activity runs with.
func (r *retrySpec) policy() RetryPolicy {
	p := RetryPolicy{MaxAttempts: 1, InitialInterval: time.Second, BackoffCoefficient: 2}
	if r == nil {
		return p
	}
	if r.MaxAttempts != nil {
		p.MaxAttempts = *r.MaxAttempts
	}
	if r.InitialInterval != nil {
		p.InitialInterval = time.Duration(*r.InitialInterval)
	}
	if r.BackoffCoefficient != nil {
		p.BackoffCoefficient = *r.BackoffCoefficient
	}
	p.MaxInterval = 100 * p.InitialInterval
	if r.MaxInterval != nil {
		p.MaxInterval = time.Duration(*r.MaxInterval)
	}
	return p
}

// waitEventSpec waits for an external event.
type waitEventSpec struct {
	Name    name           `json:"name" jsonschema:"required" jsonschema_description:"The event's name."`
	Timeout *durationValue `json:"timeout,omitempty" jsonschema_description:"Gives up waiting after this long; the step then fails."`
}

// subOrchestrationSpec starts a child instance.
type subOrchestrationSpec struct {
	Name       name        `json:"name" jsonschema:"required" jsonschema_description:"The child's definition name."`
	Input      Value       `json:"input,omitempty" jsonschema_description:"The child's input, with ${ ... } expressions."`
	Version    *version    `json:"version,omitempty" jsonschema_description:"Pins the child's definition version; the latest registered when absent."`
	InstanceID *instanceID `json:"instance_id,omitempty" jsonschema_description:"Names the child instance; derived from the parent when absent."`
}

// forEachSpec runs steps per item.
type forEachSpec struct {
	Items       items    `json:"items" jsonschema:"required" jsonschema_description:"A list, or an expression whose value is a list."`
	Concurrency *int     `json:"concurrency,omitempty" jsonschema:"minimum=1,maximum=1000" jsonschema_description:"How many items run at once (default 1)."`
	Steps       loopBody `json:"steps" jsonschema:"required" jsonschema_description:"The steps run per item; item and index are declared in their expressions."`
}

func (f *forEachSpec) read(d *decoder, path string, v any) {
	if d.nest(path) {
		d.object(path, v, f, "must be an object")
		d.depth--
	}
}

// continueAsNewSpec ends the execution and starts the next one.
type continueAsNewSpec struct {
	Input Value `json:"input,omitempty" jsonschema_description:"The next execution's input, with ${ ... } expressions."`
}

func (c *continueAsNewSpec) read(d *decoder, path string, v any) {
	if v == nil {
		c.Input.read(d, join(path, "input"), nil)
		return
	}
	d.object(path, v, c, "must be an object with input")
}

// stepSequence is a list of steps run in order.
type stepSequence []stepSpec

func (s *stepSequence) read(d *decoder, path string, v any) { *s = d.stepList(path, v, true) }

// loopBody is the steps of a for_each, run once per item: item and index are declared
// in their expressions.
type loopBody []stepSpec

func (s *loopBody) read(d *decoder, path string, v any) {
	loop := d.loop
	d.loop = true
	*s = d.stepList(path, v, true)
	d.loop = loop
}

// branches are the steps of a parallel, each run on its own.
type branches []stepSpec

func (b *branches) read(d *decoder, path string, v any) {
	if d.nest(path) {
		*b = d.stepList(path, v, false)
		d.depth--
	}
}

// raceBranches are the steps of a race: at least two.
type raceBranches []stepSpec

func (b *raceBranches) read(d *decoder, path string, v any) {
	if d.nest(path) {
		*b = d.stepList(path, v, false)
		d.depth--
		if len(*b) == 1 {
			d.errorf(path, "a race needs at least two branches")
		}
	}
}

// name names a definition, an activity, a task queue or an event.
type name string

func (n *name) read(d *decoder, path string, v any) {
	if v == nil {
		d.errorf(path, "is required")
		return
	}
	s, ok := v.(string)
	if !ok {
		d.errorf(path, "must be a string")
		return
	}
	if !namePattern.MatchString(s) {
		d.errorf(path, "%q is not a valid name (letters, digits and _.:/-, at most 200)", s)
	}
	*n = name(s)
}

// version is a definition's version: a name, or a number kept as it is written.
type version string

func (ver *version) read(d *decoder, path string, v any) {
	var n name
	switch x := v.(type) {
	case nil:
		d.errorf(path, "is required")
	case json.Number:
		n.read(d, path, x.String())
	case string:
		n.read(d, path, x)
	default:
		d.errorf(path, "must be a string or a number")
	}
	*ver = version(n)
}

// stepID is a step's id, unique in the definition.
type stepID string

func (id *stepID) read(d *decoder, path string, v any) {
	s, ok := v.(string)
	switch {
	case !ok:
		d.errorf(path, "must be a string")
	case !stepIDPattern.MatchString(s):
		d.errorf(path, "%q is not a valid id (a letter or _, then letters, digits or _, at most 64)", s)
	default:
		step := strings.TrimSuffix(path, ".id")
		if prev, dup := d.ids[s]; dup {
			d.errorf(path, "duplicate id %q (also at %s)", s, prev)
		} else {
			d.ids[s] = step
		}
		*id = stepID(s)
	}
}

// condition is a step's if: a boolean or a single expression.
type condition Value

func (c *condition) read(d *decoder, path string, v any) {
	switch x := v.(type) {
	case bool:
		*c = condition{source: x, t: &template{constant: true, value: x, path: path}}
	case string:
		val := d.value(path, x)
		if val.t != nil && val.t.kind != exprTemplate {
			d.errorf(path, "must be a boolean or a single ${ ... } expression")
		}
		*c = condition(val)
	default:
		d.errorf(path, "must be a boolean or a single ${ ... } expression")
	}
}

// durationValue is a duration such as "90s" or "2d", or an expression evaluated at run
// time.
type durationValue Value

func (dv *durationValue) read(d *decoder, path string, v any) {
	s, ok := v.(string)
	if !ok {
		d.errorf(path, "must be a duration string such as \"30s\" or an expression")
		return
	}
	val := d.value(path, s)
	if val.IsConstant() {
		if _, err := parseDuration(s); err != nil {
			d.errorf(path, "%s", err)
		}
	}
	*dv = durationValue(val)
}

// interval is a duration written as a constant string; zero when it is not one.
type interval time.Duration

func (i *interval) read(d *decoder, path string, v any) {
	s, ok := v.(string)
	if !ok {
		d.errorf(path, "must be a duration string such as \"30s\"")
		return
	}
	dur, err := parseDuration(s)
	if err != nil {
		d.errorf(path, "%s", err)
		return
	}
	*i = interval(dur)
}

// message is a fail step's message: any value, null excepted.
type message Value

func (m *message) read(d *decoder, path string, v any) {
	if v == nil {
		d.errorf(path, "must be a message")
	}
	*m = message(d.value(path, v))
}

// instanceID names a child instance: a string, which may hold expressions.
type instanceID Value

func (id *instanceID) read(d *decoder, path string, v any) {
	if _, ok := v.(string); !ok {
		d.errorf(path, "must be a string")
	}
	*id = instanceID(d.value(path, v))
}

// items is what a for_each runs over: a list or an expression.
type items Value

func (it *items) read(d *decoder, path string, v any) {
	val := d.value(path, v)
	if val.IsConstant() {
		if _, isList := v.([]any); !isList {
			d.errorf(path, "must be a list or an expression")
		}
	}
	*it = items(val)
}

// variables are the names and values of a set step, names sorted.
type variables struct {
	names  []string
	values []Value
}

func (vs *variables) read(d *decoder, path string, v any) {
	obj, ok := v.(map[string]any)
	if !ok || len(obj) == 0 {
		d.errorf(path, "must be an object of variables")
		return
	}
	vs.names = sortedKeys(obj)
	vs.values = make([]Value, len(vs.names))
	for i, k := range vs.names {
		if !stepIDPattern.MatchString(k) {
			d.errorf(join(path, k), "%q is not a valid variable name", k)
		}
		vs.values[i] = d.value(join(path, k), obj[k])
	}
}

// read reads any JSON value whose strings may hold ${ ... } expressions.
func (val *Value) read(d *decoder, path string, v any) { *val = d.value(path, v) }
