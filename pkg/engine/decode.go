package engine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// decoder reads a document's JSON tree into the types of language.go, collecting every
// problem with its path instead of stopping at the first. A key that names no field is
// a problem too: a typo in a definition is never silently ignored.
type decoder struct {
	errs  []FieldError
	ids   map[string]string // step id -> path of its step
	refs  []stepRef
	steps int  // steps read so far
	depth int  // parallel, race and for_each levels around what is read
	loop  bool // inside a for_each body: item and index are declared
}

type stepRef struct{ path, id string }

// reader is a type of the definition language that reads itself from a JSON value.
type reader interface {
	read(d *decoder, path string, v any)
}

func (d *decoder) errorf(path, format string, args ...any) {
	d.errs = append(d.errs, FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// nest enters a parallel, race or for_each at path, reporting false (and an error) when
// that would nest deeper than MaxDepth; the caller decrements depth after a true.
func (d *decoder) nest(path string) bool {
	if d.depth+1 > MaxDepth {
		d.errorf(path, "nesting deeper than %d levels", MaxDepth)
		return false
	}
	d.depth++
	return true
}

// decode reads v into rv, which is addressable.
func (d *decoder) decode(path string, v any, rv reflect.Value, f *field) {
	if r, ok := rv.Addr().Interface().(reader); ok {
		r.read(d, path, v)
		return
	}
	switch rv.Kind() {
	case reflect.Pointer:
		rv.Set(reflect.New(rv.Type().Elem()))
		d.decode(path, v, rv.Elem(), f)
	case reflect.Struct:
		d.object(path, v, rv.Addr().Interface(), "must be an object")
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			d.errorf(path, "must be a boolean")
		}
		rv.SetBool(b)
	case reflect.Int:
		n, ok := v.(json.Number)
		i, err := n.Int64()
		if !ok || err != nil || float64(i) < f.minimum || float64(i) > f.maximum {
			d.errorf(path, "must be an integer from %d to %d", int64(f.minimum), int64(f.maximum))
			return
		}
		rv.SetInt(i)
	case reflect.Float64:
		n, ok := v.(json.Number)
		x, err := n.Float64()
		if !ok || err != nil || x < f.minimum || x > f.maximum {
			d.errorf(path, "must be a number from %g to %g", f.minimum, f.maximum)
			return
		}
		rv.SetFloat(x)
	default:
		panic(fmt.Sprintf("engine: no way to read a %s from a definition", rv.Type()))
	}
}

// object reads v, which must be an object (shape says what it must be otherwise), into
// the struct ptr points to, reporting keys that name no field. A required field that is
// absent is reported; an absent field of a type that reads itself, not a pointer, reads
// null. It reports whether v was an object.
func (d *decoder) object(path string, v any, ptr any, shape string) bool {
	obj, ok := v.(map[string]any)
	if !ok {
		d.errorf(path, "%s", shape)
		return false
	}
	rv := reflect.ValueOf(ptr).Elem()
	s := structOf(rv.Type())
	d.unknownFields(path, obj, s)
	d.fields(path, obj, rv, s, func(*field) bool { return true })
	return true
}

// unknownFields reports the keys of obj that name no field of s, in key order.
func (d *decoder) unknownFields(path string, obj map[string]any, s *structType) {
	for _, k := range sortedKeys(obj) {
		if _, ok := s.byName[k]; !ok {
			d.errorf(join(path, k), "unknown field")
		}
	}
}

// fields reads the fields of s that want accepts from obj into rv, in declaration order.
func (d *decoder) fields(path string, obj map[string]any, rv reflect.Value, s *structType, want func(*field) bool) {
	for i := range s.fields {
		f := &s.fields[i]
		if !want(f) {
			continue
		}
		at := join(path, f.name)
		fv := rv.Field(f.index)
		v, present := obj[f.name]
		switch {
		case present:
			d.decode(at, v, fv, f)
		case f.required:
			d.errorf(at, "is required")
		case fv.Kind() != reflect.Pointer && fv.Addr().Type().Implements(readerType):
			d.decode(at, nil, fv, f)
		}
	}
}

var readerType = reflect.TypeFor[reader]()

// field is a struct field of the definition language.
type field struct {
	name     string // its key in a document
	index    int
	required bool
	action   bool // one of a step's actions
	// minimum and maximum bound a number.
	minimum, maximum float64
}

type structType struct {
	fields []field
	byName map[string]*field
}

var structTypes sync.Map // reflect.Type -> *structType

// structOf returns the fields of a struct type of the definition language, read from
// the tags the JSON Schema is generated from too.
func structOf(t reflect.Type) *structType {
	if s, ok := structTypes.Load(t); ok {
		return s.(*structType)
	}
	s := &structType{byName: map[string]*field{}}
	for i := range t.NumField() {
		sf := t.Field(i)
		key, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if !sf.IsExported() || key == "" {
			continue
		}
		f := field{name: key, index: i, action: sf.Tag.Get("orchard") == "action"}
		for opt := range strings.SplitSeq(sf.Tag.Get("jsonschema"), ",") {
			k, val, _ := strings.Cut(opt, "=")
			switch k {
			case "required":
				f.required = true
			case "minimum":
				f.minimum = mustFloat(val)
			case "maximum":
				f.maximum = mustFloat(val)
			}
		}
		s.fields = append(s.fields, f)
	}
	for i := range s.fields {
		s.byName[s.fields[i].name] = &s.fields[i]
	}
	actual, _ := structTypes.LoadOrStore(t, s)
	return actual.(*structType)
}

func mustFloat(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic("engine: bad bound in a jsonschema tag: " + s)
	}
	return f
}

// actionKeys are the keys of a step's actions, in declaration order.
var actionKeys = sync.OnceValue(func() []string {
	var keys []string
	for _, f := range structOf(reflect.TypeFor[stepSpec]()).fields {
		if f.action {
			keys = append(keys, f.name)
		}
	}
	return keys
})

// stepList reads a list of steps. In a sequence, steps after an unconditional return,
// fail or continue_as_new are unreachable; branches of parallel and race are not a
// sequence.
func (d *decoder) stepList(path string, v any, sequence bool) []stepSpec {
	list, ok := v.([]any)
	if !ok {
		d.errorf(path, "must be a list of steps")
		return nil
	}
	if len(list) == 0 {
		d.errorf(path, "must hold at least one step")
		return nil
	}
	steps := make([]stepSpec, len(list))
	ended := ""
	for i, item := range list {
		at := index(path, i)
		if ended != "" {
			d.errorf(at, "unreachable: follows %s", ended)
			ended = "" // report only the first unreachable step of a list
		}
		s := &steps[i]
		s.read(d, at, item)
		if sequence && s.If == nil && (s.Return != nil || s.Fail != nil || s.ContinueAsNew != nil) {
			ended = "the unconditional " + s.action() + " at " + at
		}
	}
	return steps
}

func (s *stepSpec) read(d *decoder, path string, v any) {
	s.path = path
	d.steps++
	if d.steps == MaxSteps+1 {
		d.errorf(path, "more than %d steps in the definition", MaxSteps)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		d.errorf(path, "a step is an object with one action (%s)", strings.Join(actionKeys(), ", "))
		return
	}
	rv := reflect.ValueOf(s).Elem()
	st := structOf(rv.Type())
	d.unknownFields(path, obj, st)
	d.fields(path, obj, rv, st, func(f *field) bool { return !f.action })
	var actions []string
	for _, k := range actionKeys() {
		if _, ok := obj[k]; ok {
			actions = append(actions, k)
		}
	}
	switch len(actions) {
	case 0:
		d.errorf(path, "has no action (one of %s)", strings.Join(actionKeys(), ", "))
	case 1:
		d.fields(path, obj, rv, st, func(f *field) bool { return f.name == actions[0] })
	default:
		d.errorf(path, "has %d actions (%s); a step has exactly one", len(actions), strings.Join(actions, ", "))
	}
}

// action names the step's action.
func (s *stepSpec) action() string {
	rv := reflect.ValueOf(s).Elem()
	for _, f := range structOf(rv.Type()).fields {
		if f.action && !rv.Field(f.index).IsNil() {
			return f.name
		}
	}
	return "nothing"
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// value compiles a JSON value whose strings may hold expressions.
func (d *decoder) value(path string, v any) Value {
	return Value{source: v, t: d.template(path, v)}
}

func (d *decoder) template(path string, v any) *template {
	switch x := v.(type) {
	case json.Number:
		return &template{kind: constantTemplate, constant: true, value: normalizeNumbers(x), path: path}
	case string:
		parts, isExpr, err := splitTemplate(x)
		if err != nil {
			d.errorf(path, "%s", err)
			return &template{kind: constantTemplate, constant: true, value: x, path: path}
		}
		if len(parts) == 1 && isExpr[0] {
			if e := d.expr(path, parts[0]); e != nil {
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
			t.parts = append(t.parts, segment{expr: d.expr(path, part)})
		}
		if !hasExpr {
			return &template{kind: constantTemplate, constant: true, value: x, path: path}
		}
		return t
	case []any:
		t := &template{kind: listTemplate, path: path, constant: true}
		for i, item := range x {
			it := d.template(index(path, i), item)
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
			ft := d.template(join(path, k), x[k])
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

func (d *decoder) expr(path, src string) *expression {
	e, refs, err := compileExpression(src, d.loop)
	if err != nil {
		d.errorf(path, "%s", err)
		return nil
	}
	for _, id := range refs {
		d.refs = append(d.refs, stepRef{path: path, id: id})
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
