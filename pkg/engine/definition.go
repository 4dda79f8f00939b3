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
	p := &parser{ids: map[string]string{}}
	def := p.definition(tree)
	for _, ref := range p.refs {
		if _, ok := p.ids[ref.id]; !ok {
			p.errorf(ref.path, "unknown step id %q", ref.id)
		}
	}
	if len(p.errs) > 0 {
		return nil, &ValidationError{Errors: p.errs}
	}
	if def.document, err = json.Marshal(tree); err != nil {
		return nil, &ValidationError{Errors: []FieldError{{Reason: "cannot be written as JSON: " + err.Error()}}}
	}
	return def, nil
}

type stepRef struct{ path, id string }

// parser walks the decoded document, building the Definition and collecting errors.
type parser struct {
	errs  []FieldError
	ids   map[string]string // step id -> path of its step
	refs  []stepRef
	steps int
}

func (p *parser) errorf(path, format string, args ...any) {
	p.errs = append(p.errs, FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

var (
	stepIDPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	namePattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}$`)
	actionKeys    = []string{"activity", "timer", "wait_event", "sub_orchestration", "parallel", "race", "for_each", "set", "fail", "continue_as_new", "return"}
)

func (p *parser) definition(tree any) *Definition {
	obj, ok := tree.(map[string]any)
	if !ok {
		p.errorf("", "a definition is an object with name, version and steps")
		return nil
	}
	p.fields("", obj, "name", "version", "steps", "output")
	def := &Definition{
		Name:    p.name("name", obj["name"], true),
		Version: p.version("version", obj["version"]),
	}
	if _, ok := obj["steps"]; !ok {
		p.errorf("steps", "is required")
	}
	def.Steps = p.stepList("steps", obj["steps"], 0, false, true)
	if out, ok := obj["output"]; ok {
		v := p.value("output", out, false)
		def.Output = &v
	}
	return def
}

// fields reports keys of obj that are not in allowed.
func (p *parser) fields(path string, obj map[string]any, allowed ...string) {
	for _, k := range sortedKeys(obj) {
		found := false
		for _, a := range allowed {
			if k == a {
				found = true
				break
			}
		}
		if !found {
			p.errorf(join(path, k), "unknown field")
		}
	}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func (p *parser) name(path string, v any, required bool) string {
	if v == nil {
		if required {
			p.errorf(path, "is required")
		}
		return ""
	}
	s, ok := v.(string)
	if !ok {
		p.errorf(path, "must be a string")
		return ""
	}
	if !namePattern.MatchString(s) {
		p.errorf(path, "%q is not a valid name (letters, digits and _.:/-, at most 200)", s)
	}
	return s
}

func (p *parser) version(path string, v any) string {
	switch x := v.(type) {
	case nil:
		p.errorf(path, "is required")
	case json.Number:
		return p.name(path, x.String(), true)
	case string:
		return p.name(path, x, true)
	default:
		p.errorf(path, "must be a string or a number")
	}
	return ""
}

// stepList reads a list of steps. In a sequence, steps after an unconditional return,
// fail or continue_as_new are unreachable; branches of parallel and race are not a
// sequence.
func (p *parser) stepList(path string, v any, depth int, loop, sequence bool) []Step {
	list, ok := v.([]any)
	if !ok {
		if v != nil {
			p.errorf(path, "must be a list of steps")
		}
		return nil
	}
	if len(list) == 0 {
		p.errorf(path, "must hold at least one step")
		return nil
	}
	steps := make([]Step, 0, len(list))
	ended := ""
	for i, item := range list {
		at := index(path, i)
		if ended != "" {
			p.errorf(at, "unreachable: follows %s", ended)
			ended = "" // report only the first unreachable step of a list
		}
		s := p.step(at, item, depth, loop)
		if sequence && s.If == nil && (s.Return != nil || s.Fail != nil || s.ContinueAsNew != nil) {
			ended = "the unconditional " + s.action() + " at " + at
		}
		steps = append(steps, s)
	}
	return steps
}

func (p *parser) step(path string, v any, depth int, loop bool) Step {
	s := Step{path: path}
	p.steps++
	if p.steps == MaxSteps+1 {
		p.errorf(path, "more than %d steps in the definition", MaxSteps)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		p.errorf(path, "a step is an object with one action (%s)", strings.Join(actionKeys, ", "))
		return s
	}
	p.fields(path, obj, append([]string{"id", "if", "continue_on_error"}, actionKeys...)...)
	if id, ok := obj["id"]; ok {
		str, isStr := id.(string)
		switch {
		case !isStr:
			p.errorf(join(path, "id"), "must be a string")
		case !stepIDPattern.MatchString(str):
			p.errorf(join(path, "id"), "%q is not a valid id (a letter or _, then letters, digits or _, at most 64)", str)
		default:
			if prev, dup := p.ids[str]; dup {
				p.errorf(join(path, "id"), "duplicate id %q (also at %s)", str, prev)
			} else {
				p.ids[str] = path
			}
			s.ID = str
		}
	}
	if cond, ok := obj["if"]; ok {
		at := join(path, "if")
		switch c := cond.(type) {
		case bool:
			v := Value{source: c, t: &template{constant: true, value: c, path: at}}
			s.If = &v
		case string:
			v := p.value(at, c, loop)
			if v.t != nil && v.t.kind != exprTemplate {
				p.errorf(at, "must be a boolean or a single ${ ... } expression")
			}
			s.If = &v
		default:
			p.errorf(at, "must be a boolean or a single ${ ... } expression")
		}
	}
	if c, ok := obj["continue_on_error"]; ok {
		b, isBool := c.(bool)
		if !isBool {
			p.errorf(join(path, "continue_on_error"), "must be a boolean")
		}
		s.ContinueOnError = b
	}
	var actions []string
	for _, k := range actionKeys {
		if _, ok := obj[k]; ok {
			actions = append(actions, k)
		}
	}
	switch len(actions) {
	case 0:
		p.errorf(path, "has no action (one of %s)", strings.Join(actionKeys, ", "))
		return s
	case 1:
	default:
		p.errorf(path, "has %d actions (%s); a step has exactly one", len(actions), strings.Join(actions, ", "))
		return s
	}
	action := actions[0]
	at := join(path, action)
	body := obj[action]
	nested := func() bool {
		if depth+1 > MaxDepth {
			p.errorf(at, "nesting deeper than %d levels", MaxDepth)
			return false
		}
		return true
	}
	switch action {
	case "activity":
		s.Activity = p.activity(at, body, loop)
	case "timer":
		v := p.duration(at, body, loop)
		s.Timer = &v
	case "wait_event":
		s.WaitEvent = p.waitEvent(at, body, loop)
	case "sub_orchestration":
		s.SubOrchestration = p.subOrchestration(at, body, loop)
	case "parallel", "race":
		if !nested() {
			return s
		}
		branches := p.stepList(at, body, depth+1, loop, false)
		if branches == nil && body == nil {
			p.errorf(at, "must be a list of steps")
		}
		if action == "race" && len(branches) == 1 {
			p.errorf(at, "a race needs at least two branches")
		}
		if action == "parallel" {
			s.Parallel = branches
		} else {
			s.Race = branches
		}
	case "for_each":
		if !nested() {
			return s
		}
		s.ForEach = p.forEach(at, body, depth+1, loop)
	case "set":
		p.set(&s, at, body, loop)
	case "fail":
		if body == nil {
			p.errorf(at, "must be a message")
		}
		v := p.value(at, body, loop)
		s.Fail = &v
	case "continue_as_new":
		obj, ok := body.(map[string]any)
		if !ok && body != nil {
			p.errorf(at, "must be an object with input")
			break
		}
		p.fields(at, obj, "input")
		s.ContinueAsNew = &ContinueAsNewStep{Input: p.value(join(at, "input"), obj["input"], loop)}
	case "return":
		v := p.value(at, body, loop)
		s.Return = &v
	}
	return s
}

func (s *Step) action() string {
	switch {
	case s.Activity != nil:
		return "activity"
	case s.Timer != nil:
		return "timer"
	case s.WaitEvent != nil:
		return "wait_event"
	case s.SubOrchestration != nil:
		return "sub_orchestration"
	case s.Parallel != nil:
		return "parallel"
	case s.Race != nil:
		return "race"
	case s.ForEach != nil:
		return "for_each"
	case s.Set != nil:
		return "set"
	case s.Fail != nil:
		return "fail"
	case s.ContinueAsNew != nil:
		return "continue_as_new"
	case s.Return != nil:
		return "return"
	}
	return "nothing"
}

func (p *parser) object(path string, v any) map[string]any {
	obj, ok := v.(map[string]any)
	if !ok {
		p.errorf(path, "must be an object")
		return map[string]any{}
	}
	return obj
}

func (p *parser) activity(path string, v any, loop bool) *ActivityStep {
	obj := p.object(path, v)
	p.fields(path, obj, "name", "task_queue", "input", "retry", "timeout")
	a := &ActivityStep{
		Name:      p.name(join(path, "name"), obj["name"], true),
		TaskQueue: p.name(join(path, "task_queue"), obj["task_queue"], true),
		Input:     p.value(join(path, "input"), obj["input"], loop),
		Retry:     RetryPolicy{MaxAttempts: 1, InitialInterval: time.Second, BackoffCoefficient: 2},
	}
	if t, ok := obj["timeout"]; ok {
		d := p.duration(join(path, "timeout"), t, loop)
		a.Timeout = &d
	}
	if r, ok := obj["retry"]; ok {
		at := join(path, "retry")
		ro := p.object(at, r)
		p.fields(at, ro, "max_attempts", "initial_interval", "backoff_coefficient", "max_interval")
		if n, ok := ro["max_attempts"]; ok {
			a.Retry.MaxAttempts = p.integer(join(at, "max_attempts"), n, 1, 1000)
		}
		if d, ok := ro["initial_interval"]; ok {
			a.Retry.InitialInterval = p.staticDuration(join(at, "initial_interval"), d)
		}
		if c, ok := ro["backoff_coefficient"]; ok {
			a.Retry.BackoffCoefficient = p.number(join(at, "backoff_coefficient"), c, 1, 100)
		}
		a.Retry.MaxInterval = 100 * a.Retry.InitialInterval
		if d, ok := ro["max_interval"]; ok {
			a.Retry.MaxInterval = p.staticDuration(join(at, "max_interval"), d)
			if a.Retry.MaxInterval < a.Retry.InitialInterval {
				p.errorf(join(at, "max_interval"), "is shorter than initial_interval")
			}
		}
	}
	return a
}

func (p *parser) waitEvent(path string, v any, loop bool) *WaitEventStep {
	obj := p.object(path, v)
	p.fields(path, obj, "name", "timeout")
	w := &WaitEventStep{Name: p.name(join(path, "name"), obj["name"], true)}
	if t, ok := obj["timeout"]; ok {
		d := p.duration(join(path, "timeout"), t, loop)
		w.Timeout = &d
	}
	return w
}

func (p *parser) subOrchestration(path string, v any, loop bool) *SubOrchestrationStep {
	obj := p.object(path, v)
	p.fields(path, obj, "name", "version", "input", "instance_id")
	c := &SubOrchestrationStep{
		Name:  p.name(join(path, "name"), obj["name"], true),
		Input: p.value(join(path, "input"), obj["input"], loop),
	}
	if ver, ok := obj["version"]; ok {
		c.Version = p.version(join(path, "version"), ver)
	}
	if id, ok := obj["instance_id"]; ok {
		at := join(path, "instance_id")
		if _, isStr := id.(string); !isStr {
			p.errorf(at, "must be a string")
		}
		v := p.value(at, id, loop)
		c.InstanceID = &v
	}
	return c
}

func (p *parser) forEach(path string, v any, depth int, loop bool) *ForEachStep {
	obj := p.object(path, v)
	p.fields(path, obj, "items", "steps", "concurrency")
	f := &ForEachStep{Concurrency: 1}
	if items, ok := obj["items"]; ok {
		f.Items = p.value(join(path, "items"), items, loop)
		if f.Items.IsConstant() {
			if _, isList := f.Items.source.([]any); !isList {
				p.errorf(join(path, "items"), "must be a list or an expression")
			}
		}
	} else {
		p.errorf(join(path, "items"), "is required")
	}
	if c, ok := obj["concurrency"]; ok {
		f.Concurrency = p.integer(join(path, "concurrency"), c, 1, 1000)
	}
	if _, ok := obj["steps"]; !ok {
		p.errorf(join(path, "steps"), "is required")
	}
	f.Steps = p.stepList(join(path, "steps"), obj["steps"], depth, true, true)
	return f
}

func (p *parser) set(s *Step, path string, v any, loop bool) {
	obj, ok := v.(map[string]any)
	if !ok || len(obj) == 0 {
		p.errorf(path, "must be an object of variables")
		return
	}
	s.Set = make(map[string]Value, len(obj))
	s.setKeys = sortedKeys(obj)
	for _, k := range s.setKeys {
		if !stepIDPattern.MatchString(k) {
			p.errorf(join(path, k), "%q is not a valid variable name", k)
		}
		s.Set[k] = p.value(join(path, k), obj[k], loop)
		s.setValues = append(s.setValues, s.Set[k])
	}
}

func (p *parser) integer(path string, v any, min, max int64) int {
	n, ok := v.(json.Number)
	i, err := n.Int64()
	if !ok || err != nil || i < min || i > max {
		p.errorf(path, "must be an integer from %d to %d", min, max)
		return int(min)
	}
	return int(i)
}

func (p *parser) number(path string, v any, min, max float64) float64 {
	n, ok := v.(json.Number)
	f, err := n.Float64()
	if !ok || err != nil || f < min || f > max {
		p.errorf(path, "must be a number from %g to %g", min, max)
		return min
	}
	return f
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

func (p *parser) staticDuration(path string, v any) time.Duration {
	s, ok := v.(string)
	if !ok {
		p.errorf(path, "must be a duration string such as \"30s\"")
		return time.Second
	}
	d, err := parseDuration(s)
	if err != nil {
		p.errorf(path, "%s", err)
		return time.Second
	}
	return d
}

// duration reads a duration that may be an expression evaluated at run time.
func (p *parser) duration(path string, v any, loop bool) Value {
	s, ok := v.(string)
	if !ok {
		p.errorf(path, "must be a duration string such as \"30s\" or an expression")
		return Value{}
	}
	val := p.value(path, s, loop)
	if val.IsConstant() {
		if _, err := parseDuration(s); err != nil {
			p.errorf(path, "%s", err)
		}
	}
	return val
}

// value compiles a JSON value whose strings may hold expressions.
func (p *parser) value(path string, v any, loop bool) Value {
	t := p.template(path, v, loop)
	return Value{source: v, t: t}
}

func (p *parser) template(path string, v any, loop bool) *template {
	switch x := v.(type) {
	case json.Number:
		return &template{kind: constantTemplate, constant: true, value: normalizeNumbers(x), path: path}
	case string:
		parts, isExpr, err := splitTemplate(x)
		if err != nil {
			p.errorf(path, "%s", err)
			return &template{kind: constantTemplate, constant: true, value: x, path: path}
		}
		if len(parts) == 1 && isExpr[0] {
			if e := p.expr(path, parts[0], loop); e != nil {
				return &template{kind: exprTemplate, expr: e, path: path}
			}
			return &template{kind: constantTemplate, constant: true, value: x, path: path}
		}
		t := &template{kind: stringTemplate, path: path}
		hasExpr := false
		for i, part := range parts {
			if !isExpr[i] {
				t.parts = append(t.parts, segment{text: part})
				continue
			}
			hasExpr = true
			t.parts = append(t.parts, segment{expr: p.expr(path, part, loop)})
		}
		if !hasExpr {
			return &template{kind: constantTemplate, constant: true, value: x, path: path}
		}
		return t
	case []any:
		t := &template{kind: listTemplate, path: path, constant: true}
		for i, item := range x {
			it := p.template(index(path, i), item, loop)
			t.constant = t.constant && it.constant
			t.list = append(t.list, it)
		}
		if t.constant {
			return &template{kind: constantTemplate, constant: true, value: normalizeNumbers(copyJSON(x)), path: path}
		}
		return t
	case map[string]any:
		t := &template{kind: objectTemplate, path: path, constant: true}
		t.keys = sortedKeys(x)
		for _, k := range t.keys {
			ft := p.template(join(path, k), x[k], loop)
			t.constant = t.constant && ft.constant
			t.fields = append(t.fields, ft)
		}
		if t.constant {
			return &template{kind: constantTemplate, constant: true, value: normalizeNumbers(copyJSON(x)), path: path}
		}
		return t
	default: // nil, bool
		return &template{kind: constantTemplate, constant: true, value: x, path: path}
	}
}

func (p *parser) expr(path, src string, loop bool) *expression {
	e, refs, err := compileExpression(src, loop)
	if err != nil {
		p.errorf(path, "%s", err)
		return nil
	}
	for _, id := range refs {
		p.refs = append(p.refs, stepRef{path: path, id: id})
	}
	return e
}

// copyJSON deep-copies a decoded JSON value so that the definition's constants never
// share memory with the parse tree.
func copyJSON(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = copyJSON(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			out[k] = copyJSON(item)
		}
		return out
	}
	return v
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
