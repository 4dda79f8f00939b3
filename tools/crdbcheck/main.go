// Command crdbcheck checks Orchard's SQL with CockroachDB 25.2's own parser:
// every migration that runs on CockroachDB (schema/migrations and
// schema/crdb_only) and every statement our code sent while the tests ran
// (captured by internal/sqlcapture). It fails on a statement CockroachDB
// cannot parse, on one that breaks a rule of rules.go (what CockroachDB
// parses but does not do as PostgreSQL does), and on a call to a function
// that is not on the allow-list of functions.go.
//
// schema/pg_only is not checked: it runs only on PostgreSQL, by design (its
// storage parameters mean nothing to CockroachDB).
//
// It is its own Go module so that the main module does not depend on
// CockroachDB's parser. Run it as `make crdb-check`.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/orchardhq/orchard/internal/sqlcapture"
	"github.com/orchardhq/orchard/schema"
)

func main() {
	captured := flag.String("captured", "", "directory of captured statements ("+sqlcapture.EnvCapture+" of a test run); empty checks the migrations only")
	listFunctions := flag.Bool("functions", false, "list the function calls seen, with their argument types")
	flag.Parse()
	start := time.Now()

	migrations, err := loadMigrations()
	if err != nil {
		fail(err)
	}
	stmts := migrations
	if *captured != "" {
		got, err := loadCaptured(*captured)
		if err != nil {
			fail(err)
		}
		stmts = append(stmts, got...)
	}
	checker := NewChecker(migrations)
	var findings []Finding
	for _, s := range stmts {
		findings = append(findings, checker.Check(s)...)
	}
	for _, f := range findings {
		fmt.Println(f)
	}
	if *listFunctions {
		fmt.Println("function calls:")
		for _, call := range sortedKeys(checker.Functions) {
			fmt.Println("   ", call)
		}
	}
	fmt.Printf("crdbcheck: %d migration statements, %d captured statements, %d distinct function calls, %d findings (%s)\n",
		len(migrations), len(stmts)-len(migrations), len(checker.Functions), len(findings), time.Since(start).Round(time.Millisecond))
	if *captured == "" {
		fmt.Println("crdbcheck: the store's statements were not checked: give -captured the " + sqlcapture.EnvCapture + " directory of a `make test` run")
	}
	if len(findings) > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "crdbcheck:", err)
	os.Exit(2)
}

// loadMigrations returns the migrations that run on CockroachDB, statement
// by statement, as the migrator sends them.
func loadMigrations() ([]*Statement, error) {
	migrations, err := schema.Migrations(true)
	if err != nil {
		return nil, err
	}
	var out []*Statement
	for _, m := range migrations {
		source, file := Common, "schema/migrations/"+m.Version+".sql"
		if strings.HasPrefix(m.Version, "crdb_only/") {
			source, file = CockroachOnly, "schema/"+m.Version+".sql"
		}
		for i, sql := range m.Statements {
			out = append(out, &Statement{SQL: sql, Source: source, Where: []string{fmt.Sprintf("%s, statement %d", file, i+1)}})
		}
	}
	return out, nil
}

// loadCaptured returns the distinct statements of a capture directory, each
// with every isolation level it ran at and the functions that sent it. The
// migrations' statements are left out: they are checked from the files, and
// those of schema/pg_only (which the tests, on PostgreSQL, run) not at all.
func loadCaptured(dir string) ([]*Statement, error) {
	records, err := sqlcapture.Read(dir)
	if err != nil {
		return nil, err
	}
	migrationSQL := map[string]bool{}
	for _, cockroach := range []bool{false, true} {
		migrations, err := schema.Migrations(cockroach)
		if err != nil {
			return nil, err
		}
		for _, m := range migrations {
			for _, sql := range m.Statements {
				migrationSQL[sql] = true
			}
		}
	}
	bySQL := map[string]*Statement{}
	isos := map[string]map[string]bool{}
	callers := map[string]map[string]bool{}
	fromStore := false
	for _, r := range records {
		if migrationSQL[r.SQL] {
			continue
		}
		s := bySQL[r.SQL]
		if s == nil {
			s = &Statement{SQL: r.SQL, Source: Captured}
			bySQL[r.SQL] = s
			isos[r.SQL] = map[string]bool{}
			callers[r.SQL] = map[string]bool{}
		}
		isos[r.SQL][r.Isolation] = true
		if len(r.Caller) > 0 {
			callers[r.SQL][r.Caller[0]] = true
			fromStore = fromStore || strings.HasPrefix(r.Caller[0], "github.com/orchardhq/orchard/pkg/store/crdb.")
		}
	}
	if !fromStore {
		return nil, fmt.Errorf("%s holds no statement of pkg/store/crdb: was it the %s directory of a `make test` run?", dir, sqlcapture.EnvCapture)
	}
	var out []*Statement
	for _, sql := range sortedKeys(bySQL) {
		s := bySQL[sql]
		s.Isolations = sortedKeys(isos[sql])
		s.Where = sortedKeys(callers[sql])
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Where[0] < out[j].Where[0] })
	return out, nil
}
