package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rc and ser are the isolation levels a captured statement ran at.
var (
	rc  = []string{"read committed"}
	ser = []string{""}
)

type ruleCase struct {
	rule      string
	source    Source
	isolation []string
	bad, good string
}

// Each rule fires on its bad statement and not on its good one.
var ruleCases = []ruleCase{
	{"parse", Captured, ser, "SELECT FROM WHERE", "SELECT 1"},
	{"parse", Captured, ser, "LISTEN jobs", "SELECT 1"},
	{"advisory-lock", Captured, ser, "SELECT pg_advisory_xact_lock(1)", "SELECT 1"},
	{"advisory-lock", Captured, ser, "SELECT pg_try_advisory_lock(1)", "SELECT 1"},
	{"listen-notify", Captured, ser, "UNLISTEN jobs", "SELECT 1"},
	{"listen-notify", Captured, ser, "SELECT pg_notify('jobs', 'x')", "SELECT 1"},
	{"trigger", Common, nil,
		"CREATE TRIGGER t BEFORE INSERT ON instances FOR EACH ROW EXECUTE FUNCTION f()",
		"CREATE INDEX IF NOT EXISTS i ON instances (tenant_id, name)"},
	{"plpgsql", Common, nil,
		"CREATE FUNCTION f() RETURNS INT8 LANGUAGE SQL AS 'SELECT 1'",
		"CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY)"},
	{"for-update-serializable", Captured, ser,
		"SELECT k FROM t WHERE k = $1 FOR UPDATE", "SELECT k FROM t WHERE k = $1 FOR UPDATE SKIP LOCKED"},
	{"for-update-serializable", Captured, []string{"read committed", "serializable"},
		"SELECT k FROM t WHERE k = $1 FOR SHARE", "SELECT k FROM t WHERE k = $1"},
	{"for-update-serializable", Captured, []string{"default"},
		"WITH l AS (SELECT k FROM t FOR UPDATE NOWAIT) SELECT * FROM l", "WITH l AS (SELECT k FROM t) SELECT * FROM l"},
	{"for-update-serializable", Captured, rc, "", "SELECT k FROM t WHERE k = $1 FOR UPDATE"},
	{"storage-parameter", Common, nil,
		"ALTER TABLE instances SET (fillfactor = 85)", "ALTER TABLE instances ADD COLUMN IF NOT EXISTS x INT8"},
	{"storage-parameter", Common, nil,
		"CREATE INDEX i ON t (k) WITH (fillfactor = 70)", "CREATE INDEX i ON t (k)"},
	{"storage-parameter", CockroachOnly, nil,
		"CREATE TABLE t (k TEXT PRIMARY KEY) WITH (autovacuum_enabled = false)",
		"CREATE INDEX i ON t (k) USING HASH WITH (bucket_count = 8)"},
	{"temporary-table", Common, nil, "CREATE TEMP TABLE t (k TEXT PRIMARY KEY)", "CREATE TABLE t (k TEXT PRIMARY KEY)"},
	{"temporary-table", Common, nil, "CREATE UNLOGGED TABLE t (k TEXT PRIMARY KEY)", "CREATE TABLE t (k TEXT PRIMARY KEY)"},
	{"system-catalog", Captured, ser, "SELECT * FROM pg_locks", "SELECT * FROM instance_leases"},
	{"system-catalog", Captured, ser, "SELECT * FROM pg_catalog.pg_class", "SELECT * FROM public.instances"},
	{"system-catalog", Captured, ser, "SELECT * FROM crdb_internal.cluster_locks", "SELECT 1"},
	{"system-catalog", Captured, ser, "SELECT table_name FROM information_schema.tables", "SELECT 1"},
	{"sequence", Common, nil, "CREATE SEQUENCE s", "CREATE TABLE t (id UUID PRIMARY KEY DEFAULT gen_random_uuid())"},
	{"sequence", Common, nil, "CREATE TABLE t (id SERIAL8 PRIMARY KEY)", "CREATE TABLE t (id INT8 PRIMARY KEY)"},
	{"sequence", Common, nil, "CREATE TABLE t (id INT8 GENERATED ALWAYS AS IDENTITY)", "CREATE TABLE t (id INT8)"},
	{"sequence", Captured, ser, "SELECT nextval('s')", "SELECT gen_random_uuid()"},
	{"mutation-limit", Captured, ser, "DELETE FROM t WHERE k > $1 LIMIT 10",
		"DELETE FROM t WHERE k IN (SELECT k FROM t WHERE k > $1 LIMIT 10)"},
	{"mutation-limit", Captured, ser, "UPDATE t SET v = 1 ORDER BY k LIMIT 10", "UPDATE t SET v = 1 WHERE k = $1"},
	{"mutation-limit", CockroachOnly, nil, "", "DELETE FROM t WHERE k > 0 LIMIT 10"},
	{"upsert", Captured, ser, "UPSERT INTO t (k, v) VALUES ($1, $2)",
		"INSERT INTO t (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v"},
	{"upsert", CockroachOnly, nil, "", "UPSERT INTO t (k, v) VALUES (1, 2)"},
	{"as-of-system-time", Captured, ser, "SELECT k FROM t AS OF SYSTEM TIME '-10s'", "SELECT k FROM t"},
	{"as-of-system-time", Captured, ser, "BEGIN AS OF SYSTEM TIME '-10s'", "BEGIN ISOLATION LEVEL READ COMMITTED"},
	{"hash-sharded", Common, nil, "CREATE INDEX i ON t (k) USING HASH", "CREATE INDEX i ON t (k)"},
	{"hash-sharded", CockroachOnly, nil, "", "CREATE INDEX i ON t (k) USING HASH"},
	{"index-name", Common, nil, "DROP INDEX IF EXISTS t@i", "DROP INDEX IF EXISTS i"},
	{"index-name", Captured, ser, "SELECT k FROM t@i", "SELECT k FROM t"},
	{"zone-config", Common, nil, "ALTER TABLE t CONFIGURE ZONE USING gc.ttlseconds = 600", "ALTER TABLE t ADD COLUMN IF NOT EXISTS v INT8"},
	{"zone-config", CockroachOnly, nil, "", "ALTER TABLE t CONFIGURE ZONE USING gc.ttlseconds = 600"},
	{"show", Captured, ser, "SHOW TABLES", "SELECT version()"},
	{"clock", Captured, ser, "SELECT now()", "SELECT $1::INT8"},
	{"clock", Captured, ser, "UPDATE t SET v = current_timestamp", "UPDATE t SET v = $1"},
	{"clock", Common, nil, "CREATE TABLE t (at TIMESTAMPTZ DEFAULT statement_timestamp())", "CREATE TABLE t (at INT8 NOT NULL)"},
	{"naked-int", Common, nil, "CREATE TABLE t (n INT)", "CREATE TABLE t (n INT8)"},
	{"naked-int", Captured, ser, "SELECT $1::INTEGER", "SELECT $1::INT4"},
	{"system-column", Captured, ser, "SELECT ctid FROM t", "SELECT k FROM t"},
	{"system-column", Captured, ser, "SELECT t.xmin FROM t", "SELECT t.k FROM t"},
	{"system-column", Captured, ser, "SELECT crdb_internal_mvcc_timestamp FROM t", "SELECT k FROM t"},
	{"multiple-modifications", Captured, ser,
		"WITH a AS (UPDATE t SET v = 1 WHERE k = $1 RETURNING k) DELETE FROM t WHERE k = $2",
		"WITH a AS (UPDATE t SET v = 1 WHERE k = $1 RETURNING k) DELETE FROM u WHERE k = $2"},
	{"multiple-modifications", Captured, ser,
		"WITH a AS (INSERT INTO t (k) VALUES (1) ON CONFLICT DO NOTHING RETURNING k) INSERT INTO t (k) VALUES (2)",
		"WITH a AS (INSERT INTO t (k) VALUES (1) RETURNING k) INSERT INTO t (k) SELECT k + 1 FROM a"},
	{"null-order", Captured, ser, "SELECT k FROM t ORDER BY m LIMIT 10", "SELECT k FROM t ORDER BY n LIMIT 10"},
	{"null-order", Captured, ser, "SELECT k FROM t WHERE k > $1 ORDER BY t.m DESC", "SELECT k FROM t ORDER BY t.m DESC NULLS LAST"},
	{"null-order", Captured, ser, "SELECT k FROM t WHERE m IS NULL OR k = $1 ORDER BY m", "SELECT k FROM t WHERE m IS NOT NULL ORDER BY m"},
	{"null-order", Captured, ser, "SELECT k FROM t WHERE m IS DISTINCT FROM $1 ORDER BY m", "SELECT k FROM t WHERE k = $2 AND (m, k) > ($1, $2) ORDER BY m, k"},
	{"null-order", Captured, ser, "SELECT array_agg(k ORDER BY m) FROM t", "SELECT array_agg(k ORDER BY n) FROM t"},
	{"null-order", Captured, ser, "SELECT max(k) OVER (ORDER BY m) FROM t", "SELECT max(k) OVER (ORDER BY m NULLS FIRST) FROM t"},
	{"function", Captured, ser, "SELECT array_to_string($1::TEXT[], ',')", "SELECT cardinality($1::TEXT[])"},
	{"function", Captured, ser, "SELECT cardinality(k) FROM t", "SELECT cardinality(ks) FROM t"},
	{"function", Captured, ser, "SELECT sum(k) FROM t", "SELECT sum(n) FROM t"},
	{"function", Captured, ser, "SELECT bool_or(n) FROM t", "SELECT bool_or(n > 0) FROM t"},
	{"function", Captured, ser, "SELECT unnest($1::TEXT[], $2::INT8)", "SELECT * FROM unnest($1::TEXT[], $2::INT8[])"},
	{"function", Captured, ser, "SELECT lower(k) FROM t", "SELECT k FROM t WHERE k LIKE $1 ESCAPE '\\'"},
}

// testColumns are the columns the function and NULL order checks know:
// t (k TEXT, n INT8 NOT NULL, ks TEXT[], m INT8).
var testColumns = []*Statement{{SQL: "CREATE TABLE t (k TEXT PRIMARY KEY, n INT8 NOT NULL, ks TEXT[], m INT8)", Source: Common}}

func findings(s *Statement) []Finding {
	return NewChecker(testColumns).Check(s)
}

func TestRules(t *testing.T) {
	for _, tc := range ruleCases {
		check := func(sql string, want bool) {
			t.Helper()
			s := &Statement{SQL: sql, Source: tc.source, Isolations: tc.isolation}
			var got []string
			fired := false
			for _, f := range findings(s) {
				got = append(got, f.Rule+": "+f.Msg)
				fired = fired || f.Rule == tc.rule
			}
			if fired != want {
				t.Errorf("%s on %s %q (isolation %q): fired = %v, want %v; findings: %v",
					tc.rule, tc.source, sql, tc.isolation, fired, want, got)
			}
		}
		if tc.bad != "" {
			check(tc.bad, true)
		}
		check(tc.good, false)
	}
}

// Every rule has a case that makes it fire.
func TestEveryRuleIsTested(t *testing.T) {
	fires := map[string]bool{}
	for _, tc := range ruleCases {
		if tc.bad != "" {
			fires[tc.rule] = true
		}
	}
	for _, r := range append(append([]rule{}, rules...), statementRules...) {
		if !fires[r.name] {
			t.Errorf("rule %s has no case where it fires", r.name)
		}
		if r.why == "" {
			t.Errorf("rule %s says not why", r.name)
		}
	}
}

// A finding names the statement, where it comes from and CockroachDB's error.
func TestFindingNamesStatementAndError(t *testing.T) {
	s := &Statement{SQL: "SELECT k FROM t WHERE", Source: Captured, Where: []string{"pkg/store/crdb.(*Store).Get x.go:1"}, Isolations: ser}
	fs := findings(s)
	if len(fs) != 1 {
		t.Fatalf("findings: %v", fs)
	}
	text := fs[0].String()
	for _, want := range []string{"[parse]", "syntax error", "SELECT k FROM t WHERE", "x.go:1", "implicit"} {
		if !strings.Contains(text, want) {
			t.Errorf("finding does not say %q:\n%s", want, text)
		}
	}
}

// The checker reads the statements the migrations really send.
func TestMigrationsLoad(t *testing.T) {
	stmts, err := loadMigrations("../..", "migrations", "crdb_only")
	if err != nil {
		t.Fatal(err)
	}
	sources := map[Source]int{}
	for _, s := range stmts {
		sources[s.Source]++
		if strings.Contains(s.SQL, "fillfactor") {
			t.Errorf("pg_only is checked: %s", s.SQL)
		}
		if strings.HasPrefix(s.SQL, "--") || !strings.HasSuffix(s.SQL, ";") {
			t.Errorf("not one whole statement: %q", s.SQL)
		}
	}
	if sources[Common] == 0 || sources[CockroachOnly] == 0 {
		t.Errorf("statements by source: %v", sources)
	}
}

// The capture is read as distinct statements with every isolation level
// seen; the migrations' statements (pg_only's above all) are left to the
// files, and a capture without the store's statements is refused.
func TestLoadCaptured(t *testing.T) {
	write := func(recs ...capturedStatement) string {
		dir := t.TempDir()
		var b strings.Builder
		for _, r := range recs {
			line, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(append(line, '\n'))
		}
		if err := os.WriteFile(filepath.Join(dir, "x.test-1.jsonl"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	store := "github.com/orchardhq/orchard/pkg/store/crdb.(*Store).Get get.go:1"
	// As the tests on PostgreSQL send it, spaced otherwise than in the file.
	migrate := "github.com/orchardhq/orchard/schema.Migrate schema.go:1"
	dir := write(
		capturedStatement{SQL: "SELECT k FROM t FOR UPDATE", Isolation: "read committed", Caller: []string{store}},
		capturedStatement{SQL: "SELECT k FROM t FOR UPDATE", Isolation: "", Caller: []string{store}},
		capturedStatement{SQL: "ALTER TABLE instances  SET (fillfactor=85)", Caller: []string{migrate}},
	)
	stmts, err := loadCaptured("../..", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) != 1 || stmts[0].SQL != "SELECT k FROM t FOR UPDATE" ||
		strings.Join(stmts[0].Isolations, ",") != ",read committed" || stmts[0].Where[0] != store {
		t.Fatalf("loaded %+v", stmts)
	}
	if _, err := loadCaptured("../..", write(capturedStatement{SQL: "SELECT 1", Caller: []string{migrate}})); err == nil {
		t.Fatal("a capture without the store's statements was taken")
	}
}
