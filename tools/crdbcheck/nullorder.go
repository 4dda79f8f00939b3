package main

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/sem/tree"
)

// nullOrderWhy says why ORDER BY must settle where NULLs go.
const nullOrderWhy = "CockroachDB sorts NULLs first in ascending order and PostgreSQL last, so pages and picks would differ: " +
	"write NULLS FIRST/LAST, or keep NULLs out in the WHERE clause (IS NOT NULL, or a comparison on the column)"

// checkNullOrder returns a message for each ORDER BY key of node that is a
// column some table lets be NULL, unless the key says where NULLs go or,
// for a query's ORDER BY, its WHERE clause keeps NULLs of that column out.
// Columns are known by name from the migrations: a name that is nullable in
// any table counts as nullable.
func (c *Checker) checkNullOrder(node any) []string {
	var (
		orders tree.OrderBy
		where  []tree.Expr
	)
	switch t := node.(type) {
	case *tree.Select:
		orders = t.OrderBy
		if sc, ok := t.Select.(*tree.SelectClause); ok && sc.Where != nil {
			where = conjuncts(sc.Where.Expr, nil)
		}
	case *tree.FuncExpr:
		orders = t.OrderBy
	case *tree.WindowDef:
		orders = t.OrderBy
	default:
		return nil
	}
	var out []string
	for _, o := range orders {
		if o.OrderType != tree.OrderByColumn || o.NullsOrder != tree.DefaultNullsOrder {
			continue
		}
		col := columnName(o.Expr)
		if col == "" || !c.nullable[col] || excludesNulls(where, col) {
			continue
		}
		out = append(out, fmt.Sprintf("ORDER BY %s: %s may be NULL (%s)", tree.AsString(o.Expr), col, nullOrderWhy))
	}
	return out
}

func (c *Checker) addNullability(def *tree.ColumnTableDef) {
	name := string(def.Name)
	if def.Nullable.Nullability != tree.NotNull && !def.PrimaryKey.IsPrimaryKey {
		c.nullable[name] = true
	}
}

// conjuncts appends the terms of e's top-level ANDs to out.
func conjuncts(e tree.Expr, out []tree.Expr) []tree.Expr {
	switch t := e.(type) {
	case *tree.AndExpr:
		return conjuncts(t.Right, conjuncts(t.Left, out))
	case *tree.ParenExpr:
		return conjuncts(t.Expr, out)
	}
	return append(out, e)
}

// excludesNulls reports whether one of the conjuncts is false or unknown
// when col is NULL: col IS NOT NULL, or a comparison with col on one side
// (alone or in a tuple).
func excludesNulls(where []tree.Expr, col string) bool {
	for _, e := range where {
		switch t := e.(type) {
		case *tree.IsNotNullExpr:
			if columnName(t.Expr) == col {
				return true
			}
		case *tree.ComparisonExpr:
			if strings.Contains(t.Operator.String(), "DISTINCT") {
				continue
			}
			for _, side := range []tree.Expr{t.Left, t.Right} {
				if columnName(side) == col {
					return true
				}
				if tuple, ok := side.(*tree.Tuple); ok {
					for _, x := range tuple.Exprs {
						if columnName(x) == col {
							return true
						}
					}
				}
			}
		}
	}
	return false
}

// columnName is the column an expression names, "" when it is not a bare
// column reference.
func columnName(e tree.Expr) string {
	if p, ok := e.(*tree.ParenExpr); ok {
		e = p.Expr
	}
	switch t := e.(type) {
	case *tree.UnresolvedName:
		if !t.Star {
			return strings.ToLower(t.Parts[0])
		}
	case *tree.ColumnItem:
		return strings.ToLower(string(t.ColumnName))
	}
	return ""
}
