package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/sem/tree"
	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/types"
)

// rule is one thing that CockroachDB parses but does not do the way
// PostgreSQL does (or that only one of them accepts, where the tests on
// PostgreSQL would not notice). check returns a message when node breaks it.
type rule struct {
	name  string
	why   string
	check func(c *stmtContext, node any) string
}

// rules apply to every node of every statement (walk).
var rules = []rule{
	{"advisory-lock", "advisory locks are no-ops on CockroachDB: they exclude nothing",
		func(c *stmtContext, n any) string {
			if name := funcName(n); strings.HasPrefix(name, "pg_advisory") || strings.HasPrefix(name, "pg_try_advisory") {
				return name + "()"
			}
			return ""
		}},
	{"listen-notify", "CockroachDB has no LISTEN/NOTIFY: UNLISTEN is accepted and does nothing, pg_notify does not exist",
		func(c *stmtContext, n any) string {
			if _, ok := n.(*tree.Unlisten); ok {
				return "UNLISTEN"
			}
			if funcName(n) == "pg_notify" {
				return "pg_notify()"
			}
			return ""
		}},
	{"trigger", "CockroachDB 25.2's triggers are a partial PL/pgSQL implementation; no logic hides in the database (DESIGN §3)",
		func(c *stmtContext, n any) string {
			switch n.(type) {
			case *tree.CreateTrigger:
				return "CREATE TRIGGER"
			case *tree.DropTrigger:
				return "DROP TRIGGER"
			}
			return ""
		}},
	{"plpgsql", "PL/pgSQL routines and DO blocks are a subset on CockroachDB (DESIGN §3)",
		func(c *stmtContext, n any) string {
			switch n.(type) {
			case *tree.CreateRoutine:
				return "CREATE FUNCTION/PROCEDURE"
			case *tree.DoBlock:
				return "DO block"
			}
			return ""
		}},
	// The isolation levels come from the capture, which follows each
	// connection's BEGIN and COMMIT: a locking read passes only when every
	// run of it seen in the tests was in a READ COMMITTED transaction (the
	// runtime path's pipelined transactions, inBatchTx), so no list of
	// statements needs keeping by hand and a statement moved to a
	// SERIALIZABLE transaction fails at once.
	{"for-update-serializable", "CockroachDB's row locks under SERIALIZABLE are best effort: exclusion must come from a compare-and-set column or a READ COMMITTED transaction (DESIGN §3)",
		func(c *stmtContext, n any) string {
			l, ok := n.(*tree.LockingItem)
			if !ok || l.Strength == tree.ForNone || l.WaitPolicy == tree.LockWaitSkipLocked {
				return ""
			}
			// SKIP LOCKED only spreads claimers apart; a blocking or NOWAIT
			// lock is there to exclude, which CockroachDB guarantees only
			// under READ COMMITTED.
			if outside := c.outsideReadCommitted(); len(outside) > 0 {
				return fmt.Sprintf("%s without SKIP LOCKED, run %s", l.Strength, strings.Join(outside, ", "))
			}
			return ""
		}},
	{"storage-parameter", "PostgreSQL's storage parameters (fillfactor, autovacuum_*, ...) are accepted and ignored by CockroachDB: they belong in schema/pg_only",
		func(c *stmtContext, n any) string {
			params, ok := n.(tree.StorageParams)
			if !ok || len(params) == 0 {
				return ""
			}
			var names []string
			for _, p := range params {
				key := strings.ToLower(string(p.Key))
				// In crdb_only, CockroachDB's own parameters (bucket_count,
				// ttl_*) are the point; PostgreSQL's heap parameters never are.
				if c.stmt.Source != CockroachOnly || postgresStorageParam(key) {
					names = append(names, key)
				}
			}
			if len(names) == 0 {
				return ""
			}
			return "WITH (" + strings.Join(names, ", ") + ")"
		}},
	{"temporary-table", "CockroachDB refuses temporary tables unless experimental_enable_temp_tables is on, and takes UNLOGGED as an ordinary table",
		func(c *stmtContext, n any) string {
			var p tree.Persistence
			switch t := n.(type) {
			case *tree.CreateTable:
				p = t.Persistence
			case *tree.CreateSequence:
				p = t.Persistence
			case *tree.CreateView:
				p = t.Persistence
			}
			switch p {
			case tree.PersistenceTemporary:
				return "TEMPORARY"
			case tree.PersistenceUnlogged:
				return "UNLOGGED"
			}
			return ""
		}},
	{"system-catalog", "CockroachDB's pg_catalog and information_schema imitate PostgreSQL's in part (pg_locks and pg_stat_* are empty, many tables are missing) and crdb_internal is CockroachDB's alone",
		func(c *stmtContext, n any) string {
			var schema, name string
			switch t := n.(type) {
			case *tree.TableName:
				schema, name = string(t.SchemaName), string(t.ObjectName)
			case *tree.UnresolvedObjectName:
				name = t.Parts[0]
				if t.NumParts > 1 {
					schema = t.Parts[1]
				}
			default:
				return ""
			}
			schema, name = strings.ToLower(schema), strings.ToLower(name)
			switch {
			case schema == "pg_catalog" || schema == "information_schema" || schema == "crdb_internal" || schema == "pg_extension":
				return schema + "." + name
			case schema == "" && (strings.HasPrefix(name, "pg_") || strings.HasPrefix(name, "crdb_internal")):
				return name
			}
			return ""
		}},
	{"sequence", "a sequence is one hot range on CockroachDB, where SERIAL is unique_rowid() and not a sequence: ids are gen_random_uuid() (DESIGN §3)",
		func(c *stmtContext, n any) string {
			switch t := n.(type) {
			case *tree.CreateSequence:
				return "CREATE SEQUENCE"
			case *tree.AlterSequence:
				return "ALTER SEQUENCE"
			case *tree.ColumnTableDef:
				if t.IsSerial {
					return "SERIAL column " + string(t.Name)
				}
				if t.GeneratedIdentity.IsGeneratedAsIdentity {
					return "identity column " + string(t.Name)
				}
			}
			switch name := funcName(n); name {
			case "nextval", "currval", "setval", "lastval", "unique_rowid":
				return name + "()"
			}
			return ""
		}},
	{"mutation-limit", "DELETE/UPDATE with LIMIT or ORDER BY is CockroachDB's alone: select the keys with a bounded subquery (DESIGN §3)",
		notInCockroachOnly(func(c *stmtContext, n any) string {
			switch t := n.(type) {
			case *tree.Delete:
				if t.Limit != nil || len(t.OrderBy) > 0 {
					return "DELETE ... LIMIT/ORDER BY"
				}
			case *tree.Update:
				if t.Limit != nil || len(t.OrderBy) > 0 {
					return "UPDATE ... LIMIT/ORDER BY"
				}
			}
			return ""
		})},
	{"upsert", "UPSERT is CockroachDB's alone: write INSERT ... ON CONFLICT (DESIGN §3)",
		notInCockroachOnly(func(c *stmtContext, n any) string {
			if ins, ok := n.(*tree.Insert); ok && ins.OnConflict != nil && ins.OnConflict.IsUpsertAlias() {
				return "UPSERT"
			}
			return ""
		})},
	{"as-of-system-time", "AS OF SYSTEM TIME is CockroachDB's alone (DESIGN §3)",
		notInCockroachOnly(func(c *stmtContext, n any) string {
			if a, ok := n.(*tree.AsOfClause); ok && a.Expr != nil {
				return "AS OF SYSTEM TIME"
			}
			return ""
		})},
	{"hash-sharded", "USING HASH is CockroachDB's alone (DESIGN §3)",
		notInCockroachOnly(func(c *stmtContext, n any) string {
			if _, ok := n.(*tree.ShardedIndexDef); ok {
				return "USING HASH"
			}
			return ""
		})},
	{"index-name", "table@index names an index only on CockroachDB",
		notInCockroachOnly(func(c *stmtContext, n any) string {
			switch t := n.(type) {
			case *tree.AliasedTableExpr:
				if t.IndexFlags != nil {
					return "index hint " + t.String()
				}
			case *tree.TableIndexName:
				if t.Table.ObjectName != "" {
					return "index " + t.String()
				}
			}
			return ""
		})},
	{"zone-config", "zone configurations are CockroachDB's alone (DESIGN §3)",
		notInCockroachOnly(func(c *stmtContext, n any) string {
			if _, ok := n.(*tree.SetZoneConfig); ok {
				return "CONFIGURE ZONE"
			}
			return ""
		})},
	{"show", "SHOW statements differ between the two (DESIGN §3)",
		notInCockroachOnly(func(c *stmtContext, n any) string {
			if s, ok := n.(tree.Statement); ok && s == c.root && strings.HasPrefix(s.StatementTag(), "SHOW") {
				return s.StatementTag()
			}
			return ""
		})},
	{"clock", "times come from the Go clock, never the database's: now() is the transaction's start on CockroachDB, and tests control time (DESIGN §2, §3)",
		func(c *stmtContext, n any) string {
			switch name := funcName(n); name {
			case "now", "current_timestamp", "current_date", "current_time", "localtime", "localtimestamp",
				"statement_timestamp", "transaction_timestamp", "clock_timestamp", "timeofday",
				"cluster_logical_timestamp", "age":
				return name + "()"
			}
			return ""
		}},
	{"naked-int", "INT and INTEGER are INT8 on CockroachDB and INT4 on PostgreSQL: name the width",
		func(c *stmtContext, n any) string {
			if t, ok := n.(*types.T); ok && t == nakedInt {
				return "INT"
			}
			return ""
		}},
	{"system-column", "hidden columns differ: ctid, xmin and friends are PostgreSQL's, rowid and crdb_internal_* CockroachDB's",
		func(c *stmtContext, n any) string {
			var name string
			switch t := n.(type) {
			case *tree.UnresolvedName:
				if t.Star {
					return ""
				}
				name = t.Parts[0]
			case *tree.ColumnItem:
				name = string(t.ColumnName)
			default:
				return ""
			}
			switch name = strings.ToLower(name); {
			case name == "ctid" || name == "xmin" || name == "xmax" || name == "cmin" || name == "cmax" ||
				name == "tableoid" || name == "oid" || name == "rowid" || strings.HasPrefix(name, "crdb_internal_"):
				return name
			}
			return ""
		}},
}

// statementRules look at a whole parsed statement.
var statementRules = []rule{
	{"multiple-modifications", "CockroachDB refuses a statement that modifies one table twice unless every modification is an INSERT without ON CONFLICT (enable_multiple_modifications_of_table is off: cockroachdb/cockroach#70976)",
		func(c *stmtContext, n any) string {
			type mods struct{ plainInserts, others int }
			byTable := map[string]*mods{}
			count := func(table tree.TableExpr, plainInsert bool) {
				name := tableExprName(table)
				if byTable[name] == nil {
					byTable[name] = &mods{}
				}
				if plainInsert {
					byTable[name].plainInserts++
				} else {
					byTable[name].others++
				}
			}
			walk(n, func(node any) {
				switch t := node.(type) {
				case *tree.Insert:
					count(t.Table, t.OnConflict == nil)
				case *tree.Update:
					count(t.Table, false)
				case *tree.Delete:
					count(t.Table, false)
				}
			})
			var twice []string
			for name, m := range byTable {
				if m.others > 0 && m.plainInserts+m.others > 1 {
					twice = append(twice, name)
				}
			}
			sort.Strings(twice)
			if len(twice) > 0 {
				return "modifies " + strings.Join(twice, ", ") + " more than once"
			}
			return ""
		}},
}

// exemptions lets a statement break a rule, each with its reason: a
// statement is exempt when its text contains the fragment. Keep it empty
// where possible; every entry is a debt.
var exemptions = []struct {
	rule, fragment, why string
}{}

func exempt(ruleName, sql string) bool {
	for _, e := range exemptions {
		if e.rule == ruleName && strings.Contains(sql, e.fragment) {
			return true
		}
	}
	return false
}

func notInCockroachOnly(check func(c *stmtContext, n any) string) func(c *stmtContext, n any) string {
	return func(c *stmtContext, n any) string {
		if c.stmt.Source == CockroachOnly {
			return ""
		}
		return check(c, n)
	}
}

// funcName is the lower-case, unqualified name of a function call node, or "".
func funcName(n any) string {
	f, ok := n.(*tree.FuncExpr)
	if !ok {
		return ""
	}
	name := strings.ToLower(f.Func.String())
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return strings.Trim(name, `"`)
}

func tableExprName(t tree.TableExpr) string {
	if a, ok := t.(*tree.AliasedTableExpr); ok {
		t = a.Expr
	}
	switch n := t.(type) {
	case *tree.TableName:
		return string(n.ObjectName)
	case *tree.UnresolvedObjectName:
		return n.Parts[0]
	}
	return tree.AsString(t)
}

// postgresStorageParam reports whether key is one of PostgreSQL's table or
// index storage parameters, which do nothing on CockroachDB.
func postgresStorageParam(key string) bool {
	switch key {
	case "fillfactor", "parallel_workers", "toast_tuple_target", "user_catalog_table",
		"vacuum_index_cleanup", "vacuum_truncate", "buffering", "fastupdate", "gin_pending_list_limit",
		"deduplicate_items", "pages_per_range", "autosummarize":
		return true
	}
	return strings.HasPrefix(key, "autovacuum_") || strings.HasPrefix(key, "toast.") || strings.HasPrefix(key, "log_autovacuum")
}
