package engine

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

// Limits on definitions and on the evaluation of their expressions.
const (
	// MaxDefinitionSize is the largest definition document, in bytes.
	MaxDefinitionSize = 1 << 20
	// MaxSteps is the largest number of steps in a definition, nested steps included.
	MaxSteps = 1000
	// MaxDepth is the deepest nesting of parallel, race and for_each steps.
	MaxDepth = 8
	// MaxExpressionSize is the longest expression between ${ and }, in bytes.
	MaxExpressionSize = 2048
	// MaxExpressionCost is the CEL runtime cost an evaluation may spend before it fails.
	MaxExpressionCost = 100_000
)

// celEnvs holds the two CEL environments: one for expressions outside any for_each body,
// one inside (with item and index declared). Both are built once per process.
var celEnvs = sync.OnceValues(func() ([2]*cel.Env, error) {
	common := []cel.EnvOption{
		cel.Variable("input", cel.DynType),
		cel.Variable("vars", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("steps", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("instance", cel.MapType(cel.StringType, cel.DynType)),
		cel.CustomTypeAdapter(celAdapter),
		cel.ParserExpressionSizeLimit(MaxExpressionSize),
		cel.ParserRecursionLimit(50),
	}
	outside, err := cel.NewEnv(common...)
	if err != nil {
		return [2]*cel.Env{}, err
	}
	inside, err := outside.Extend(cel.Variable("item", cel.DynType), cel.Variable("index", cel.IntType))
	if err != nil {
		return [2]*cel.Env{}, err
	}
	return [2]*cel.Env{outside, inside}, nil
})

// expression is one compiled ${ ... } expression.
type expression struct {
	source  string
	program cel.Program
	// path is set when the expression is a name followed by field selections, such as
	// index or steps.work.output.ok, which evaluate reads without running the program.
	path *selectPath
}

// selectPath is an expression of the form name.field1.field2...
type selectPath struct {
	name   string
	fields []string
}

// compileExpression compiles src for use inside (loop) or outside a for_each body and
// returns the step ids it refers to through steps.<id> or steps["id"].
func compileExpression(src string, loop bool) (*expression, []string, error) {
	if len(src) > MaxExpressionSize {
		return nil, nil, fmt.Errorf("expression is longer than %d bytes", MaxExpressionSize)
	}
	envs, err := celEnvs()
	if err != nil {
		return nil, nil, fmt.Errorf("expression environment: %w", err)
	}
	env := envs[0]
	if loop {
		env = envs[1]
	}
	ast, issues := env.Compile(src)
	if issues != nil && issues.Err() != nil {
		return nil, nil, fmt.Errorf("invalid expression %q: %s", src, oneLine(issues.Err().Error()))
	}
	opts := []cel.ProgramOption{cel.CustomDecoratorV2(sortMapLiterals)}
	// Runtime cost tracking costs allocations on every evaluation; an expression whose
	// worst case, estimated with every size unknown, stays under the limit needs none.
	if est, err := env.EstimateCost(ast, unknownSizes{}); err != nil || est.Max > MaxExpressionCost {
		opts = append(opts, cel.CostLimit(MaxExpressionCost))
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid expression %q: %s", src, oneLine(err.Error()))
	}
	return &expression{source: src, program: prg, path: selectPathOf(ast.NativeRep().Expr())}, stepReferences(ast.NativeRep()), nil
}

// selectPathOf returns the select path that e is, or nil.
func selectPathOf(e celast.Expr) *selectPath {
	var fields []string
	for e.Kind() == celast.SelectKind {
		sel := e.AsSelect()
		if sel.IsTestOnly() {
			return nil
		}
		fields = append(fields, sel.FieldName())
		e = sel.Operand()
	}
	if e.Kind() != celast.IdentKind {
		return nil
	}
	slices.Reverse(fields)
	return &selectPath{name: e.AsIdent(), fields: fields}
}

// resolve reads the path from the names of a, or reports false when the program must
// decide: a name or key is missing, a value is not a JSON object, or the value is not
// one that the program returns unchanged. When it reports true, the value is the one
// the program would return, and err reports when it is larger than m allows.
func (p *selectPath) resolve(a interpreter.Activation, m *meter) (v any, ok bool, err error) {
	v, found := a.ResolveName(p.name)
	if !found {
		return nil, false, nil
	}
	for _, field := range p.fields {
		switch x := v.(type) {
		case map[string]any:
			v, found = x[field]
		case *stepScopes:
			v, found = x.get(field)
		case *stepResult:
			v, found = x.field(field)
		default:
			return nil, false, nil
		}
		if !found {
			return nil, false, nil
		}
	}
	return plainJSON(v, m)
}

// plainJSON returns what celToJSON makes of a JSON value read from a name: the value
// itself, except that lists are copied (as the program's result is a new list), with
// its size spent from m. It reports false for anything else.
func plainJSON(v any, m *meter) (any, bool, error) {
	switch x := v.(type) {
	case nil, bool, int64, string, map[string]any:
		return v, true, measure(v, m)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, false, nil
		}
		return v, true, measure(v, m)
	case []any:
		if err := m.spend(2 + len(x)); err != nil {
			return nil, true, err
		}
		out := make([]any, len(x))
		for i, item := range x {
			var ok bool
			var err error
			if out[i], ok, err = plainJSON(item, m); !ok || err != nil {
				return nil, ok, err
			}
		}
		return out, true, nil
	}
	return nil, false, nil
}

// unknownSizes leaves every size to the worst case in cost estimates.
type unknownSizes struct{}

func (unknownSizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}
func (unknownSizes) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// stepReferences lists the ids named by steps.<id> and steps["<id>"] in a checked AST.
func stepReferences(a *celast.AST) []string {
	var ids []string
	celast.PreOrderVisit(a.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			sel := e.AsSelect()
			if sel.Operand().Kind() == celast.IdentKind && sel.Operand().AsIdent() == "steps" {
				ids = append(ids, sel.FieldName())
			}
		case celast.CallKind:
			call := e.AsCall()
			if call.FunctionName() != "_[_]" || len(call.Args()) != 2 {
				return
			}
			operand, key := call.Args()[0], call.Args()[1]
			if operand.Kind() == celast.IdentKind && operand.AsIdent() == "steps" && key.Kind() == celast.LiteralKind {
				if s, ok := key.AsLiteral().(types.String); ok {
					ids = append(ids, string(s))
				}
			}
		}
	}))
	return ids
}

// evaluate runs the expression against the names of scope and returns a JSON value,
// spending its size from m as it is built.
func (e *expression) evaluate(s interpreter.Activation, m *meter) (any, error) {
	if e.path != nil {
		v, ok, err := e.path.resolve(s, m)
		if err != nil {
			return nil, fmt.Errorf("${ %s }: %w", e.source, err)
		}
		if ok {
			return v, nil
		}
	}
	out, _, err := e.program.Eval(s)
	if err != nil {
		return nil, fmt.Errorf("${ %s }: %s", e.source, oneLine(err.Error()))
	}
	v, err := celToJSON(out, m)
	if err != nil {
		return nil, fmt.Errorf("${ %s }: %w", e.source, err)
	}
	return v, nil
}

// celToJSON converts a CEL value into a JSON value: nil, bool, int64, float64, string,
// []any or map[string]any. It spends the value's size from m as it goes: a CEL value
// can share parts with itself (a list of the same list twice), so a small one can
// stand for a JSON value exponentially larger, which must fail before it is built.
func celToJSON(v ref.Val, m *meter) (any, error) {
	switch x := v.(type) {
	case types.Null:
		return nil, m.spend(4)
	case types.Bool:
		return bool(x), m.spend(5)
	case types.Int:
		return int64(x), m.spend(intWidth(int64(x)))
	case types.Uint:
		if uint64(x) > math.MaxInt64 {
			return float64(x), m.spend(24)
		}
		return int64(x), m.spend(intWidth(int64(x)))
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", f)
		}
		return f, m.spend(24)
	case types.String:
		return string(x), m.spend(len(x) + 2)
	case types.Bytes:
		if err := m.spend(base64.StdEncoding.EncodedLen(len(x)) + 2); err != nil {
			return nil, err
		}
		return base64.StdEncoding.EncodeToString(x), nil
	case types.Timestamp:
		s := x.Time.UTC().Format("2006-01-02T15:04:05.999999999Z07:00")
		return s, m.spend(len(s) + 2)
	case types.Duration:
		s := x.Duration.String()
		return s, m.spend(len(s) + 2)
	case *types.Err:
		return nil, x
	case traits.Lister:
		n, ok := x.Size().(types.Int)
		if !ok {
			return nil, fmt.Errorf("list of unknown size")
		}
		if err := m.spend(2 + int(n)); err != nil {
			return nil, err
		}
		out := make([]any, 0, int(n))
		for i := types.Int(0); i < n; i++ {
			item, err := celToJSON(x.Get(i), m)
			if err != nil {
				return nil, err
			}
			out = append(out, item)
		}
		return out, nil
	case jsonObject:
		// JSON values are never modified in place, so the object is shared.
		return map[string]any(x), measure(map[string]any(x), m)
	case *stepResult:
		obj := x.object()
		return obj, measure(obj, m)
	case *stepScopes:
		obj := x.merged()
		return obj, measure(obj, m)
	case traits.Mapper:
		if err := m.spend(2); err != nil {
			return nil, err
		}
		out := make(map[string]any)
		it := x.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			key, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("map key %v is not a string", k)
			}
			if err := m.spend(len(key) + 4); err != nil {
				return nil, err
			}
			item, err := celToJSON(x.Get(k), m)
			if err != nil {
				return nil, err
			}
			out[string(key)] = item
		}
		return out, nil
	}
	return nil, fmt.Errorf("a %s value cannot be represented in JSON", v.Type().TypeName())
}

// jsonAdapter presents JSON values to CEL. Objects become jsonObject, which costs no
// allocation and iterates in sorted key order, so that comprehensions over them (map,
// filter, ...) are deterministic; Go map iteration order is random.
type jsonAdapter struct{ types.Adapter }

// celAdapter is the adapter of every expression environment.
var celAdapter = jsonAdapter{types.DefaultTypeAdapter}

func (a jsonAdapter) NativeToValue(v any) ref.Val {
	switch x := v.(type) {
	case map[string]any:
		return jsonObject(x)
	case []any:
		return types.NewList(a, x)
	case *stepResult:
		return x
	}
	return a.Adapter.NativeToValue(v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonObject is a JSON object as a CEL map. It deliberately does not implement
// traits.Foldable, so comprehensions use Iterator, which follows sorted keys.
type jsonObject map[string]any

func (m jsonObject) generic() traits.Mapper { return types.NewStringInterfaceMap(celAdapter, m) }

func (m jsonObject) ConvertToNative(t reflect.Type) (any, error) {
	return m.generic().ConvertToNative(t)
}

func (m jsonObject) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return m
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from map to '%s'", t)
}

func (m jsonObject) Equal(other ref.Val) ref.Val { return m.generic().Equal(other) }
func (m jsonObject) Type() ref.Type              { return types.MapType }
func (m jsonObject) Value() any                  { return map[string]any(m) }
func (m jsonObject) Size() ref.Val               { return types.Int(len(m)) }

func (m jsonObject) Contains(key ref.Val) ref.Val {
	_, found := m.Find(key)
	return types.Bool(found)
}

func (m jsonObject) Get(key ref.Val) ref.Val {
	v, found := m.Find(key)
	if !found {
		return types.NewErr("no such key: %v", key)
	}
	return v
}

func (m jsonObject) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	v, found := m[string(k)]
	if !found {
		return nil, false
	}
	return celAdapter.NativeToValue(v), true
}

func (m jsonObject) Iterator() traits.Iterator {
	keys := sortedKeys(m)
	vals := make([]ref.Val, len(keys))
	for i, k := range keys {
		vals[i] = types.String(k)
	}
	return &valIterator{vals: vals}
}

// stepResult is the value of steps.<id> for a step inside a for_each body: the JSON
// object {"output": ..., "error": ...}, with "skipped": true for a step whose condition
// was false. Iterations record many results, so they are structs rather than maps,
// which cost two allocations each. Only the layered steps variable (stepScopes) holds
// them: celToJSON turns one into its object, so JSON values never hold one. The root
// scope, which expressions may take whole, holds the objects themselves.
type stepResult struct {
	output  any
	err     any // nil, or the failure as {"kind": ..., "message": ...}
	skipped bool
}

// object returns the result as the JSON object it stands for.
func (r *stepResult) object() map[string]any {
	if r.skipped {
		return map[string]any{"output": r.output, "error": r.err, "skipped": true}
	}
	return map[string]any{"output": r.output, "error": r.err}
}

// field returns a field of the object.
func (r *stepResult) field(name string) (any, bool) {
	switch name {
	case "output":
		return r.output, true
	case "error":
		return r.err, true
	case "skipped":
		return true, r.skipped
	}
	return nil, false
}

func (r *stepResult) ConvertToNative(t reflect.Type) (any, error) {
	return jsonObject(r.object()).ConvertToNative(t)
}
func (r *stepResult) ConvertToType(t ref.Type) ref.Val {
	return jsonObject(r.object()).ConvertToType(t)
}
func (r *stepResult) Equal(other ref.Val) ref.Val { return jsonObject(r.object()).Equal(other) }
func (r *stepResult) Type() ref.Type              { return types.MapType }
func (r *stepResult) Value() any                  { return r.object() }
func (r *stepResult) Size() ref.Val               { return types.Int(len(r.object())) }
func (r *stepResult) Iterator() traits.Iterator   { return jsonObject(r.object()).Iterator() }

func (r *stepResult) Contains(key ref.Val) ref.Val {
	_, found := r.Find(key)
	return types.Bool(found)
}

func (r *stepResult) Get(key ref.Val) ref.Val {
	v, found := r.Find(key)
	if !found {
		return types.NewErr("no such key: %v", key)
	}
	return v
}

func (r *stepResult) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	v, found := r.field(string(k))
	if !found {
		return nil, false
	}
	return celAdapter.NativeToValue(v), true
}

// stepScopes is the steps variable inside for_each bodies: the step results of the
// iteration's scope over those of the enclosing scopes, without copying them. It reads
// the scopes of f and its ancestors.
type stepScopes struct {
	f *frame
}

func (s *stepScopes) merged() map[string]any {
	var scopes []*stepScope // innermost first
	for g := s.f; g != nil; g = g.parent {
		if g.steps != nil {
			scopes = append(scopes, g.steps)
		}
	}
	out := map[string]any{}
	for i := len(scopes) - 1; i >= 0; i-- {
		scopes[i].each(func(k string, v any) {
			if r, ok := v.(*stepResult); ok {
				v = r.object()
			}
			out[k] = v
		})
	}
	return out
}

func (s *stepScopes) ConvertToNative(t reflect.Type) (any, error) {
	return jsonObject(s.merged()).ConvertToNative(t)
}
func (s *stepScopes) ConvertToType(t ref.Type) ref.Val {
	return jsonObject(s.merged()).ConvertToType(t)
}
func (s *stepScopes) Equal(other ref.Val) ref.Val { return jsonObject(s.merged()).Equal(other) }
func (s *stepScopes) Type() ref.Type              { return types.MapType }
func (s *stepScopes) Value() any                  { return s.merged() }
func (s *stepScopes) Size() ref.Val               { return types.Int(len(s.merged())) }
func (s *stepScopes) Iterator() traits.Iterator   { return jsonObject(s.merged()).Iterator() }

func (s *stepScopes) Contains(key ref.Val) ref.Val {
	_, found := s.Find(key)
	return types.Bool(found)
}

func (s *stepScopes) Get(key ref.Val) ref.Val {
	v, found := s.Find(key)
	if !found {
		return types.NewErr("no such key: %v", key)
	}
	return v
}

func (s *stepScopes) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	if v, found := s.get(string(k)); found {
		return celAdapter.NativeToValue(v), true
	}
	return nil, false
}

// get returns the result of a step id from the innermost scope that has one.
func (s *stepScopes) get(id string) (any, bool) {
	for g := s.f; g != nil; g = g.parent {
		if g.steps == nil {
			continue
		}
		if v, found := g.steps.get(id); found {
			return v, true
		}
	}
	return nil, false
}

// sortMapLiterals wraps map literals built inside expressions so that their iteration
// order is sorted as well.
func sortMapLiterals(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	if c, ok := i.(interpreter.InterpretableConstructor); ok && c.Type() == types.MapType {
		return sortingNode{c}, nil
	}
	return i, nil
}

type sortingNode struct{ interpreter.InterpretableV2 }

func (n sortingNode) Eval(a interpreter.Activation) ref.Val {
	return sortMap(n.InterpretableV2.Eval(a))
}

func (n sortingNode) Exec(f *interpreter.ExecutionFrame) ref.Val {
	return sortMap(n.InterpretableV2.Exec(f))
}

func sortMap(v ref.Val) ref.Val {
	m, ok := v.(traits.Mapper)
	if !ok {
		return v
	}
	var keys []ref.Val
	it := m.Iterator()
	for it.HasNext() == types.True {
		keys = append(keys, it.Next())
	}
	slices.SortFunc(keys, func(a, b ref.Val) int {
		return strings.Compare(fmt.Sprint(a.Value()), fmt.Sprint(b.Value()))
	})
	return sortedValMap{Mapper: m, keys: keys}
}

type sortedValMap struct {
	traits.Mapper
	keys []ref.Val
}

func (m sortedValMap) Iterator() traits.Iterator { return &valIterator{vals: m.keys} }

type valIterator struct {
	vals []ref.Val
	next int
}

func (it *valIterator) HasNext() ref.Val { return types.Bool(it.next < len(it.vals)) }

func (it *valIterator) Next() ref.Val {
	if it.next >= len(it.vals) {
		return types.NewErr("iterator exhausted")
	}
	v := it.vals[it.next]
	it.next++
	return v
}

func (it *valIterator) ConvertToNative(reflect.Type) (any, error) {
	return nil, fmt.Errorf("iterator cannot be converted")
}
func (it *valIterator) ConvertToType(ref.Type) ref.Val {
	return types.NewErr("iterator cannot be converted")
}
func (it *valIterator) Equal(ref.Val) ref.Val { return types.False }
func (it *valIterator) Type() ref.Type        { return types.IteratorType }
func (it *valIterator) Value() any            { return nil }

// normalizeNumbers replaces json.Number values by int64 or float64, in place.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil || math.IsInf(f, 0) {
			return string(x)
		}
		return f
	case []any:
		for i := range x {
			x[i] = normalizeNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalizeNumbers(x[k])
		}
	}
	return v
}

// encodeJSON encodes a JSON value; map keys come out sorted, so equal values give equal
// bytes. A value nested deeper than the decoder takes is refused: what the engine
// writes, it must read back.
func encodeJSON(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if d := jsonDepth(b); d > maxJSONDepth {
		return nil, fmt.Errorf("the value is nested more than %d levels", maxJSONDepth)
	}
	return b, nil
}

// jsonDepth returns the deepest nesting of arrays and objects in a JSON text.
func jsonDepth(b []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
