package main

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/sem/tree"
	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/sem/tree/treebin"
	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/types"
)

// signature is one overload of a function, in type classes (classOf):
// "int", "string", "uuid", "jsonb", "string[]", ... and the wildcards
// "anyelement" (any one value) and "anyarray" (any array). The result may
// also be "=arg0" (the type of the first argument) or "=elem0" (the element
// type of the first argument, an array).
type signature struct {
	params   []string
	variadic bool // the last parameter repeats
	result   string
}

// functions allow-lists the functions our SQL may call: only those, and
// only with these argument types. Every overload below is one that
// CockroachDB 25.2 documents on its functions reference,
// https://www.cockroachlabs.com/docs/v25.2/functions-and-operators
// (its section in the comments), and that PostgreSQL 15 has too. Add a
// function here only after finding it, with the argument types you pass, on
// that page.
var functions = map[string][]signature{
	// Aggregate functions.
	"array_agg": {{params: []string{"anyelement"}, result: "=array0"}},
	"bool_and":  {{params: []string{"bool"}, result: "bool"}},
	"bool_or":   {{params: []string{"bool"}, result: "bool"}},
	"count": {
		{params: []string{"*"}, result: "int"},
		{params: []string{"anyelement"}, result: "int"},
	},
	"max": {{params: []string{"anyelement"}, result: "=arg0"}},
	"min": {{params: []string{"anyelement"}, result: "=arg0"}},
	// sum of INT8 is DECIMAL on CockroachDB (numeric on PostgreSQL): cast
	// the result to INT8 where Go scans an int64.
	"sum": {
		{params: []string{"int"}, result: "decimal"},
		{params: []string{"decimal"}, result: "decimal"},
	},
	// Comparison functions: greatest(anyelement...), least(anyelement...).
	"greatest": {{params: []string{"anyelement"}, variadic: true, result: "=arg0"}},
	"least":    {{params: []string{"anyelement"}, variadic: true, result: "=arg0"}},
	// BOOL functions: like_escape(unescaped: string, pattern: string,
	// escape: string). CockroachDB's parser turns the operator form
	// `x LIKE p ESCAPE e`, which is also PostgreSQL's, into this call.
	"like_escape": {{params: []string{"string", "string", "string"}, result: "bool"}},
	// Array functions.
	"cardinality": {{params: []string{"anyarray"}, result: "int"}},
	// Set-returning functions.
	"unnest": {
		{params: []string{"anyarray"}, result: "=elem0"},
		{params: []string{"anyarray", "anyarray"}, variadic: true, result: "tuple"},
	},
	// JSONB functions.
	"jsonb_each_text": {{params: []string{"jsonb"}, result: "tuple"}},
	// jsonb_build_object(anyelement...): alternating keys and values.
	"jsonb_build_object": {{params: []string{"anyelement"}, variadic: true, result: "jsonb"}},
	// ID generation functions.
	"gen_random_uuid": {{result: "uuid"}},
	// System info functions (schema.IsCockroach tells the servers apart).
	"version": {{result: "string"}},
}

// checkCall checks one function call against the allow-list; it returns a
// message when the function or the argument types are not on it.
func (c *Checker) checkCall(f *tree.FuncExpr) string {
	_, msg := c.callType(f)
	return msg
}

// callType returns the result type of a call and, when the call is not on
// the allow-list, why.
func (c *Checker) callType(f *tree.FuncExpr) (string, string) {
	name := funcName(f)
	args := make([]string, len(f.Exprs))
	for i, e := range f.Exprs {
		args[i] = c.typeOf(e)
	}
	call := fmt.Sprintf("%s(%s)", name, strings.Join(args, ", "))
	c.Functions[call] = true
	sigs, ok := functions[name]
	if !ok {
		return "any", fmt.Sprintf("%s is not on the allow-list of functions that CockroachDB 25.2 documents and PostgreSQL has (functions.go)", call)
	}
	for _, sig := range sigs {
		if result, ok := sig.match(args); ok {
			return result, ""
		}
	}
	return "any", fmt.Sprintf("%s: no allow-listed overload of %s takes these argument types (functions.go)", call, name)
}

func (s signature) match(args []string) (string, bool) {
	if len(args) < len(s.params) || (!s.variadic && len(args) > len(s.params)) {
		return "", false
	}
	for i, arg := range args {
		param := s.params[min(i, len(s.params)-1)]
		if !accepts(param, arg) {
			return "", false
		}
	}
	switch {
	case s.result == "=arg0":
		return args[0], true
	case s.result == "=array0":
		return args[0] + "[]", true
	case s.result == "=elem0":
		return strings.TrimSuffix(args[0], "[]"), true
	}
	return s.result, true
}

// accepts reports whether a parameter of class param takes an argument of
// class arg; "unknown" (a placeholder, NULL, an untyped literal) and "any"
// (a type the checker could not work out) are taken by every parameter.
func accepts(param, arg string) bool {
	switch {
	case arg == "unknown" || arg == "any":
		return param != "*"
	case param == "anyelement":
		return arg != "*"
	case param == "anyarray":
		return strings.HasSuffix(arg, "[]")
	case strings.HasSuffix(param, "[]") && arg == "any[]":
		return true
	}
	return param == arg
}

// typeOf works out the type class of an expression, as far as the statement
// and the columns of the migrations tell: "any" where they do not.
func (c *Checker) typeOf(e tree.Expr) string {
	if d, ok := e.(tree.Datum); ok && d == tree.DNull {
		return "unknown"
	}
	switch t := e.(type) {
	case *tree.NumVal:
		if strings.ContainsAny(t.String(), ".eE") {
			return "decimal"
		}
		return "int"
	case *tree.StrVal, *tree.Placeholder:
		return "unknown"
	case *tree.DBool:
		return "bool"
	case *tree.CastExpr:
		if typ, ok := t.Type.(*types.T); ok {
			return classOf(typ)
		}
	case *tree.AnnotateTypeExpr:
		if typ, ok := t.Type.(*types.T); ok {
			return classOf(typ)
		}
	case *tree.UnresolvedName:
		if t.Star {
			return "*"
		}
		if class := c.columns[t.Parts[0]]; class != "" {
			return class
		}
	case *tree.ColumnItem:
		if class := c.columns[string(t.ColumnName)]; class != "" {
			return class
		}
	case tree.UnqualifiedStar:
		return "*"
	case *tree.FuncExpr:
		result, _ := c.callType(t)
		return result
	case *tree.ParenExpr:
		return c.typeOf(t.Expr)
	case *tree.UnaryExpr:
		return c.typeOf(t.Expr)
	case *tree.ComparisonExpr, *tree.AndExpr, *tree.OrExpr, *tree.NotExpr, *tree.IsNullExpr,
		*tree.IsNotNullExpr, *tree.RangeCond, *tree.IsOfTypeExpr:
		return "bool"
	case *tree.CoalesceExpr:
		for _, x := range t.Exprs {
			if class := c.typeOf(x); class != "unknown" && class != "any" {
				return class
			}
		}
	case *tree.CaseExpr:
		for _, w := range t.Whens {
			if class := c.typeOf(w.Val); class != "unknown" && class != "any" {
				return class
			}
		}
		if t.Else != nil {
			return c.typeOf(t.Else)
		}
	case *tree.Array:
		for _, x := range t.Exprs {
			if class := c.typeOf(x); class != "unknown" && class != "any" {
				return class + "[]"
			}
		}
		return "any[]"
	case *tree.ArrayFlatten:
		return "any[]"
	case *tree.Tuple:
		return "tuple"
	case *tree.BinaryExpr:
		l, r := c.typeOf(t.Left), c.typeOf(t.Right)
		switch t.Operator.Symbol {
		case treebin.Plus, treebin.Minus, treebin.Mult:
			if l == "int" && r == "int" {
				return "int"
			}
		case treebin.Concat:
			if l == "string" || r == "string" {
				return "string"
			}
		}
	}
	return "any"
}

// classOf names a type for the allow-list.
func classOf(t *types.T) string {
	switch t.Family() {
	case types.IntFamily:
		return "int"
	case types.StringFamily:
		return "string"
	case types.BytesFamily:
		return "bytes"
	case types.BoolFamily:
		return "bool"
	case types.UuidFamily:
		return "uuid"
	case types.JsonFamily:
		return "jsonb"
	case types.DecimalFamily:
		return "decimal"
	case types.FloatFamily:
		return "float"
	case types.TimestampTZFamily:
		return "timestamptz"
	case types.TimestampFamily:
		return "timestamp"
	case types.IntervalFamily:
		return "interval"
	case types.DateFamily:
		return "date"
	case types.ArrayFamily:
		return classOf(t.ArrayContents()) + "[]"
	}
	return strings.ToLower(t.SQLStandardName())
}
