package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Definition is a parsed, validated and compiled orchestration definition. It is
// immutable and safe for concurrent use: parse it once per (name, version) and cache it.
type Definition struct {
	Name    string
	Version string
	Steps   []Step
	// Output is the execution's output when the steps run to their end; nil means null.
	Output *Value

	document json.RawMessage
}

// Document returns the definition as JSON, whatever its source format: the form to
// store, which ParseDefinition reads back to an equal definition.
func (d *Definition) Document() json.RawMessage { return d.document }

// Step is one step of a definition: an optional id and condition, and exactly one action.
type Step struct {
	// ID names the step for expressions (steps.<id>.output, steps.<id>.error).
	ID string
	// If skips the step unless it evaluates to true.
	If *Value
	// ContinueOnError records a failure of the step in steps.<id>.error and goes on,
	// instead of failing the enclosing steps.
	ContinueOnError bool

	Activity         *ActivityStep
	Timer            *Value // a duration such as "90s"
	WaitEvent        *WaitEventStep
	SubOrchestration *SubOrchestrationStep
	Parallel         []Step
	Race             []Step
	ForEach          *ForEachStep
	Set              map[string]Value
	Fail             *Value // the failure message
	ContinueAsNew    *ContinueAsNewStep
	Return           *Value // the execution's output

	path      string
	setKeys   []string // Set's names, sorted
	setValues []Value  // Set's values, in setKeys order
}

// ActivityStep schedules an activity on a task queue.
type ActivityStep struct {
	Name      string
	TaskQueue string
	Input     Value
	Retry     RetryPolicy
	// Timeout bounds each attempt; a timed-out attempt is cancelled and counts as a
	// retryable failure. Nil means no timeout.
	Timeout *Value
}

// RetryPolicy says how failed activity attempts are retried. Retries wait on durable
// timers: InitialInterval after the first failure, multiplied by BackoffCoefficient after
// each further failure, capped at MaxInterval.
type RetryPolicy struct {
	MaxAttempts        int
	InitialInterval    time.Duration
	BackoffCoefficient float64
	MaxInterval        time.Duration
}

// delay returns the wait before attempt+1 after attempt failed.
func (r RetryPolicy) delay(attempt int) time.Duration {
	d := float64(r.InitialInterval) * math.Pow(r.BackoffCoefficient, float64(attempt-1))
	if d > float64(r.MaxInterval) || math.IsInf(d, 0) || math.IsNaN(d) {
		return r.MaxInterval
	}
	return time.Duration(d)
}

// WaitEventStep waits for the next external event of a name.
type WaitEventStep struct {
	Name    string
	Timeout *Value
}

// SubOrchestrationStep starts a child instance and waits for its end.
type SubOrchestrationStep struct {
	Name string
	// Version pins the child's definition version; empty means the latest registered.
	Version string
	Input   Value
	// InstanceID names the child; nil means a deterministic id derived from the parent.
	InstanceID *Value
}

// ForEachStep runs Steps once per item of Items, at most Concurrency at a time.
type ForEachStep struct {
	Items       Value
	Steps       []Step
	Concurrency int
}

// ContinueAsNewStep ends the execution and starts the next one with Input.
type ContinueAsNewStep struct {
	Input Value
}

// FieldError is one problem in a definition: where it is and what is wrong.
type FieldError struct {
	Path   string
	Reason string
}

func (e FieldError) String() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// ValidationError lists every problem found in a definition.
type ValidationError struct {
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		lines[i] = fe.String()
	}
	return "invalid definition: " + strings.Join(lines, "; ")
}

// ParseDefinition parses a YAML or JSON definition, validates it and compiles its
// expressions. When the definition is invalid the error is a *ValidationError listing
// every problem with its path.
func ParseDefinition(doc []byte) (*Definition, error) {
	if len(doc) > MaxDefinitionSize {
		return nil, &ValidationError{Errors: []FieldError{{Reason: fmt.Sprintf("definition is larger than %d bytes", MaxDefinitionSize)}}}
	}
	tree, err := decodeDocument(doc)
	if err != nil {
		return nil, &ValidationError{Errors: []FieldError{{Reason: "not a YAML or JSON document: " + oneLine(err.Error())}}}
	}
	d := &decoder{ids: map[string]string{}}
	var src definitionSpec
	src.read(d, "", tree)
	for _, ref := range d.refs {
		if _, ok := d.ids[ref.id]; !ok {
			d.errorf(ref.path, "unknown step id %q", ref.id)
		}
	}
	if len(d.errs) > 0 {
		return nil, &ValidationError{Errors: d.errs}
	}
	def := &Definition{Name: string(src.Name), Version: string(src.Version), Steps: compileSteps(src.Steps), Output: src.Output}
	if def.document, err = json.Marshal(tree); err != nil {
		return nil, &ValidationError{Errors: []FieldError{{Reason: "cannot be written as JSON: " + err.Error()}}}
	}
	return def, nil
}

var (
	stepIDPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	namePattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}$`)
)

// compileSteps builds the steps a turn runs from steps that read without a problem.
func compileSteps(src []stepSpec) []Step {
	if src == nil {
		return nil
	}
	steps := make([]Step, len(src))
	for i := range src {
		steps[i] = src[i].compile()
	}
	return steps
}

func (s *stepSpec) compile() Step {
	out := Step{ContinueOnError: s.ContinueOnError, path: s.path, Return: s.Return}
	if s.ID != nil {
		out.ID = string(*s.ID)
	}
	if s.If != nil {
		out.If = (*Value)(s.If)
	}
	switch {
	case s.Activity != nil:
		a := s.Activity
		out.Activity = &ActivityStep{Name: string(a.Name), TaskQueue: string(a.TaskQueue), Input: a.Input, Retry: a.Retry.policy(), Timeout: (*Value)(a.Timeout)}
	case s.Timer != nil:
		out.Timer = (*Value)(s.Timer)
	case s.WaitEvent != nil:
		out.WaitEvent = &WaitEventStep{Name: string(s.WaitEvent.Name), Timeout: (*Value)(s.WaitEvent.Timeout)}
	case s.SubOrchestration != nil:
		c := s.SubOrchestration
		out.SubOrchestration = &SubOrchestrationStep{Name: string(c.Name), Input: c.Input, InstanceID: (*Value)(c.InstanceID)}
		if c.Version != nil {
			out.SubOrchestration.Version = string(*c.Version)
		}
	case s.Parallel != nil:
		out.Parallel = compileSteps(*s.Parallel)
	case s.Race != nil:
		out.Race = compileSteps(*s.Race)
	case s.ForEach != nil:
		f := &ForEachStep{Items: Value(s.ForEach.Items), Steps: compileSteps(s.ForEach.Steps), Concurrency: 1}
		if s.ForEach.Concurrency != nil {
			f.Concurrency = *s.ForEach.Concurrency
		}
		out.ForEach = f
	case s.Set != nil:
		out.setKeys, out.setValues = s.Set.names, s.Set.values
		out.Set = make(map[string]Value, len(out.setKeys))
		for i, k := range out.setKeys {
			out.Set[k] = out.setValues[i]
		}
	case s.Fail != nil:
		out.Fail = (*Value)(s.Fail)
	case s.ContinueAsNew != nil:
		out.ContinueAsNew = &ContinueAsNewStep{Input: s.ContinueAsNew.Input}
	}
	return out
}

// maxDuration bounds every duration in a definition (about ten years).
const maxDuration = 10 * 366 * 24 * time.Hour

// parseDuration reads a duration such as "1h30m", "250ms" or "2d" (days), positive and at
// most about ten years.
func parseDuration(s string) (time.Duration, error) {
	str := strings.TrimSpace(s)
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(str, "d"); ok {
		n, perr := strconv.ParseInt(days, 10, 64)
		if perr != nil || n < 0 || n > int64(maxDuration/(24*time.Hour)) {
			return 0, fmt.Errorf("%q is not a duration", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else if d, err = time.ParseDuration(str); err != nil {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	if d <= 0 || d > maxDuration {
		return 0, fmt.Errorf("%q is not a duration between 1ns and 10 years", s)
	}
	return d, nil
}

// decodeDocument reads a YAML 1.2 document (JSON included) into JSON values, numbers as
// json.Number. YAML 1.2 matters: under YAML 1.1 a key such as n or no would be a boolean.
func decodeDocument(doc []byte) (any, error) {
	var tree any
	if err := yaml.Unmarshal(doc, &tree); err != nil {
		return nil, err
	}
	return fromYAML(tree, 0)
}

func fromYAML(v any, depth int) (any, error) {
	if depth > 100 {
		return nil, fmt.Errorf("nested more than 100 levels")
	}
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case int:
		return json.Number(strconv.Itoa(x)), nil
	case int64:
		return json.Number(strconv.FormatInt(x, 10)), nil
	case uint64:
		return json.Number(strconv.FormatUint(x, 10)), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", x)
		}
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64)), nil
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			c, err := fromYAML(item, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			c, err := fromYAML(item, depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			key, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("object key %v is not a string", k)
			}
			c, err := fromYAML(item, depth+1)
			if err != nil {
				return nil, err
			}
			out[key] = c
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported YAML value of type %T", v)
}
