// Command crdbcheck checks Orchard's SQL with CockroachDB 25.2's own parser:
// every migration that runs on CockroachDB (schema/migrations and
// schema/crdb_only), every statement of the store's .sql files
// (pkg/store/crdb/sql) and every statement our code sent while the tests
// ran (captured by internal/sqlcapture). It fails on a statement CockroachDB
// cannot parse, on one that breaks a rule of rules.go (what CockroachDB
// parses but does not do as PostgreSQL does), and on a call to a function
// that is not on the allow-list of functions.go.
//
// schema/pg_only is not checked: it runs only on PostgreSQL, by design (its
// storage parameters mean nothing to CockroachDB).
//
// It is its own Go module so that the main module does not depend on
// CockroachDB's parser, and it reads the project's files rather than
// importing its packages, so that a change of the project's dependencies
// never needs this module touched. Run it as `make crdb-check`.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/parser"
)

// envCapture is internal/sqlcapture's EnvCapture.
const envCapture = "ORCHARD_SQL_CAPTURE"

func main() {
	root := flag.String("root", "../..", "the repository's root")
	captured := flag.String("captured", "", "directory of captured statements ("+envCapture+" of a test run); empty checks the migrations only")
	listFunctions := flag.Bool("functions", false, "list the function calls seen, with their argument types")
	flag.Parse()
	start := time.Now()

	migrations, err := loadMigrations(*root, "migrations", "crdb_only")
	if err != nil {
		fail(err)
	}
	named, err := loadNamed(*root)
	if err != nil {
		fail(err)
	}
	stmts := append(migrations, named...)
	if *captured != "" {
		got, err := loadCaptured(*root, *captured)
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
	fmt.Printf("crdbcheck: %d migration statements, %d named statements, %d captured statements, %d distinct function calls, %d findings (%s)\n",
		len(migrations), len(named), len(stmts)-len(migrations)-len(named), len(checker.Functions), len(findings), time.Since(start).Round(time.Millisecond))
	if *captured == "" {
		fmt.Println("crdbcheck: the store's statements were not checked: give -captured the " + envCapture + " directory of a `make test` run")
	}
	if len(findings) > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "crdbcheck:", err)
	os.Exit(2)
}

// loadMigrations returns the statements of the migration files in the
// given directories of schema/, cut where CockroachDB's scanner ends a
// statement. schema/pg_only is never among them: it runs only on
// PostgreSQL, by design.
func loadMigrations(root string, dirs ...string) ([]*Statement, error) {
	var out []*Statement
	for _, dir := range dirs {
		source := Common
		if dir == "crdb_only" {
			source = CockroachOnly
		}
		files, err := filepath.Glob(filepath.Join(root, "schema", dir, "*.sql"))
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("no migrations in %s", filepath.Join(root, "schema", dir))
		}
		sort.Strings(files)
		for _, file := range files {
			body, err := os.ReadFile(file)
			if err != nil {
				return nil, err
			}
			name := filepath.ToSlash(filepath.Join("schema", dir, filepath.Base(file)))
			for i, sql := range splitStatements(string(body)) {
				out = append(out, &Statement{SQL: sql, Source: source, Where: []string{fmt.Sprintf("%s, statement %d", name, i+1)}})
			}
		}
	}
	return out, nil
}

// splitStatements cuts a file into its statements, leaving out pieces that
// hold only comments.
func splitStatements(body string) []string {
	var out []string
	for rest := body; strings.TrimSpace(rest) != ""; {
		n, ok := parser.SplitFirstStatement(rest)
		if !ok {
			n = len(rest) // the last statement, or one the scanner cannot read: the parser says why
		}
		piece := strings.TrimSpace(rest[:n])
		rest = rest[n:]
		// The comments before a statement are about it, not part of it.
		for strings.HasPrefix(piece, "--") {
			_, after, _ := strings.Cut(piece, "\n")
			piece = strings.TrimSpace(after)
		}
		if parsed, err := parser.Parse(piece); err == nil && len(parsed) == 0 {
			continue
		}
		out = append(out, piece)
	}
	return out
}

// normalized is a statement as CockroachDB prints it back, so that a
// captured statement can be told to be a migration's whatever its spacing.
func normalized(sql string) string {
	if parsed, err := parser.Parse(sql); err == nil {
		return parsed.String()
	}
	return strings.Join(strings.Fields(strings.TrimSuffix(strings.TrimSpace(sql), ";")), " ")
}

// capturedStatement is a line of a capture file: internal/sqlcapture's
// Statement.
type capturedStatement struct {
	SQL       string   `json:"sql"`
	Isolation string   `json:"isolation"`
	Caller    []string `json:"caller"`
}

// readCaptured returns the lines of every capture file in dir.
func readCaptured(dir string) ([]capturedStatement, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var out []capturedStatement
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var s capturedStatement
			if err = json.Unmarshal(sc.Bytes(), &s); err != nil {
				break
			}
			out = append(out, s)
		}
		if err == nil {
			err = sc.Err()
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return out, nil
}

// loadCaptured returns the distinct statements of a capture directory, each
// with every isolation level it ran at and the functions that sent it. The
// migrations' statements are left out: they are checked from the files, and
// those of schema/pg_only (which the tests, on PostgreSQL, run) not at all.
func loadCaptured(root, dir string) ([]*Statement, error) {
	records, err := readCaptured(dir)
	if err != nil {
		return nil, err
	}
	migrations, err := loadMigrations(root, "migrations", "crdb_only", "pg_only")
	if err != nil {
		return nil, err
	}
	migrationSQL := map[string]bool{}
	for _, m := range migrations {
		migrationSQL[normalized(m.SQL)] = true
	}
	bySQL := map[string]*Statement{}
	skip := map[string]bool{}
	isos := map[string]map[string]bool{}
	callers := map[string]map[string]bool{}
	fromStore := false
	for _, r := range records {
		// pgx's tracers see a statement with named parameters before pgx
		// numbers them.
		r.SQL = numberNamedArgs(r.SQL)
		if len(r.Caller) > 0 {
			fromStore = fromStore || strings.HasPrefix(r.Caller[0], "github.com/orchardhq/orchard/pkg/store/crdb.")
		}
		if skip[r.SQL] {
			continue
		}
		s := bySQL[r.SQL]
		if s == nil {
			if migrationSQL[normalized(r.SQL)] {
				skip[r.SQL] = true
				continue
			}
			s = &Statement{SQL: r.SQL, Source: Captured}
			bySQL[r.SQL] = s
			isos[r.SQL] = map[string]bool{}
			callers[r.SQL] = map[string]bool{}
		}
		isos[r.SQL][r.Isolation] = true
		if len(r.Caller) > 0 {
			callers[r.SQL][r.Caller[0]] = true
		}
	}
	if !fromStore {
		return nil, fmt.Errorf("%s holds no statement of pkg/store/crdb: is it the %s directory of a `make test` run?", dir, envCapture)
	}
	var out []*Statement
	for _, sql := range sortedKeys(bySQL) {
		s := bySQL[sql]
		s.Isolations = sortedKeys(isos[sql])
		s.Where = sortedKeys(callers[sql])
		if len(s.Where) == 0 {
			s.Where = []string{"(no caller of ours on the stack)"}
		}
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Where[0] < out[j].Where[0] })
	return out, nil
}
