package main

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/parser"
	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/sem/tree"
	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/types"
	"github.com/cockroachdb/errors"
)

// Source says where a statement comes from, which decides the rules it
// answers to.
type Source int

const (
	// Common: a migration of schema/migrations, run on both databases.
	Common Source = iota
	// CockroachOnly: a migration of schema/crdb_only, run only on CockroachDB,
	// where CockroachDB's own syntax is the point.
	CockroachOnly
	// Captured: a statement our code sent while the tests ran (sqlcapture).
	Captured
	// Named: a statement of the store's .sql files (pkg/store/crdb/sql), run
	// on both databases; the isolation it runs at is known from its capture.
	Named
)

func (s Source) String() string {
	return [...]string{"schema/migrations", "schema/crdb_only", "captured", namedDir}[s]
}

// Statement is one statement to check.
type Statement struct {
	SQL    string
	Source Source
	// Where names it for a reader: a migration version and position, or the
	// functions that sent it.
	Where []string
	// Isolations lists the isolation levels it was seen running at
	// (sqlcapture.Statement.Isolation); empty for migrations.
	Isolations []string
}

// Finding is one thing wrong with a statement.
type Finding struct {
	Stmt *Statement
	Rule string // "parse", "function" or a rule's name
	Msg  string
}

func (f Finding) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s] %s\n", f.Stmt.Source, f.Rule, f.Msg)
	for _, w := range f.Stmt.Where {
		fmt.Fprintf(&b, "    from %s\n", w)
	}
	if len(f.Stmt.Isolations) > 0 {
		fmt.Fprintf(&b, "    at isolation %s\n", strings.Join(describeIsolations(f.Stmt.Isolations), ", "))
	}
	for line := range strings.SplitSeq(strings.TrimSpace(f.Stmt.SQL), "\n") {
		fmt.Fprintf(&b, "    | %s\n", line)
	}
	return b.String()
}

func describeIsolations(isos []string) []string {
	out := make([]string, len(isos))
	for i, iso := range isos {
		out[i] = describeIsolation(iso)
	}
	return out
}

func describeIsolation(iso string) string {
	switch iso {
	case "":
		return "implicit (session default: serializable)"
	case "default":
		return "BEGIN without a level (session default: serializable)"
	}
	return iso
}

// nakedInt stands for a bare INT or INTEGER in the trees the checker parses:
// CockroachDB's parser puts the session's default integer type there, and
// with this one the rules can tell INT from INT8 (see ruleNakedInt).
var nakedInt = func() *types.T { t := *types.Int; return &t }()

// Checker checks statements against CockroachDB's grammar, the rules and
// the function allow-list. Columns, learned from the migrations, type the
// arguments of function calls.
type Checker struct {
	columns  map[string]string // column name -> type class; "" when tables disagree
	nullable map[string]bool   // column names that some table lets be NULL
	// Functions records each function called and the argument types seen,
	// for the report.
	Functions map[string]bool
}

// NewChecker returns a checker that knows the columns the migrations create.
func NewChecker(migrations []*Statement) *Checker {
	c := &Checker{columns: map[string]string{}, nullable: map[string]bool{}, Functions: map[string]bool{}}
	for _, m := range migrations {
		stmts, err := parser.ParseWithInt(m.SQL, nakedInt)
		if err != nil {
			continue // reported by Check
		}
		for _, s := range stmts {
			walk(s.AST, func(n any) {
				if def, ok := n.(*tree.ColumnTableDef); ok {
					c.addColumn(string(def.Name), def.Type)
					c.addNullability(def)
				}
			})
		}
	}
	return c
}

func (c *Checker) addColumn(name string, typ tree.ResolvableTypeReference) {
	t, ok := typ.(*types.T)
	if !ok {
		return
	}
	class := classOf(t)
	if prev, seen := c.columns[name]; seen && prev != class {
		class = ""
	}
	c.columns[name] = class
}

// Check parses one statement (or a migration's text, which may hold several)
// and returns what is wrong with it.
func (c *Checker) Check(s *Statement) []Finding {
	stmts, err := parser.ParseWithInt(s.SQL, nakedInt)
	if err != nil {
		msg := err.Error()
		if d := errors.FlattenDetails(err); d != "" {
			msg += "\n" + indent(d)
		}
		return []Finding{{Stmt: s, Rule: "parse", Msg: "CockroachDB 25.2 cannot parse it: " + msg}}
	}
	var out []Finding
	for _, parsed := range stmts {
		ctx := &stmtContext{stmt: s, root: parsed.AST}
		walk(parsed.AST, func(n any) {
			for _, r := range rules {
				if msg := r.check(ctx, n); msg != "" && !exempt(r.name, s.SQL) {
					out = append(out, Finding{Stmt: s, Rule: r.name, Msg: msg + " (" + r.why + ")"})
				}
			}
			if !exempt("null-order", s.SQL) {
				for _, msg := range c.checkNullOrder(n) {
					out = append(out, Finding{Stmt: s, Rule: "null-order", Msg: msg})
				}
			}
			if f, ok := n.(*tree.FuncExpr); ok {
				if msg := c.checkCall(f); msg != "" && !exempt("function", s.SQL) {
					out = append(out, Finding{Stmt: s, Rule: "function", Msg: msg})
				}
			}
		})
		for _, r := range statementRules {
			if msg := r.check(ctx, parsed.AST); msg != "" && !exempt(r.name, s.SQL) {
				out = append(out, Finding{Stmt: s, Rule: r.name, Msg: msg + " (" + r.why + ")"})
			}
		}
	}
	return out
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// stmtContext is what a rule knows beyond the node it looks at.
type stmtContext struct {
	stmt *Statement
	root tree.Statement
}

// outsideReadCommitted describes the transactions other than READ COMMITTED
// ones that the statement was seen running in; a migration never runs in a
// READ COMMITTED transaction.
func (c *stmtContext) outsideReadCommitted() []string {
	var out []string
	for _, iso := range c.stmt.Isolations {
		if iso != "read committed" {
			out = append(out, describeIsolation(iso))
		}
	}
	if c.stmt.Source == Common || c.stmt.Source == CockroachOnly {
		out = append(out, "a migration")
	}
	return out
}

// walk calls fn on every node of a parsed statement: every value reachable
// through exported fields, structs as pointers to them, so that no clause is
// skipped (tree.WalkStmt leaves out FROM subqueries and join conditions).
// Type descriptions (*types.T) are visited but not entered. The trees the
// parser builds have no cycles.
func walk(root any, fn func(any)) {
	typeT := reflect.TypeOf(types.T{})
	var visit func(v reflect.Value)
	visit = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Invalid:
		case reflect.Interface:
			if !v.IsNil() {
				visit(v.Elem())
			}
		case reflect.Pointer:
			if v.IsNil() {
				return
			}
			if v.Elem().Kind() == reflect.Struct {
				visit(v.Elem())
				return
			}
			fn(v.Interface())
			visit(v.Elem())
		case reflect.Struct:
			if !v.CanAddr() {
				cp := reflect.New(v.Type()).Elem()
				cp.Set(v)
				v = cp
			}
			fn(v.Addr().Interface())
			if v.Type() == typeT {
				return
			}
			for i := 0; i < v.NumField(); i++ {
				if v.Type().Field(i).IsExported() {
					visit(v.Field(i))
				}
			}
		case reflect.Slice, reflect.Array:
			if v.Kind() == reflect.Slice && v.IsNil() {
				return
			}
			fn(v.Interface())
			for i := 0; i < v.Len(); i++ {
				visit(v.Index(i))
			}
		default:
			fn(v.Interface())
		}
	}
	visit(reflect.ValueOf(root))
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
