package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// namedDir holds the store's statements, one per "-- name:" header
// (pkg/store/crdb/statements.go reads the same files).
const namedDir = "pkg/store/crdb/sql"

// loadNamed returns the statements of the store's .sql files, each with its
// named parameters (@tenant_id) numbered as pgx numbers them when it sends
// the statement ($1 for the first name to appear, and so on), because
// CockroachDB's parser reads "@" as an index hint.
func loadNamed(root string) ([]*Statement, error) {
	files, err := filepath.Glob(filepath.Join(root, namedDir, "*.sql"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no statements in %s", filepath.Join(root, namedDir))
	}
	sort.Strings(files)
	var out []*Statement
	for _, file := range files {
		body, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		where := filepath.ToSlash(filepath.Join(namedDir, filepath.Base(file)))
		var name string
		var sql strings.Builder
		flush := func() {
			if name != "" {
				out = append(out, &Statement{SQL: numberNamedArgs(sql.String()), Source: Named,
					Where: []string{where + ": " + name}})
			}
		}
		for line := range strings.Lines(string(body)) {
			if rest, ok := strings.CutPrefix(line, "-- name: "); ok {
				flush()
				name = strings.TrimSpace(rest)
				sql.Reset()
				continue
			}
			sql.WriteString(line)
		}
		flush()
	}
	return out, nil
}

// numberNamedArgs replaces each @name outside literals, quoted names and
// comments with $n, numbering the names in order of first appearance, as
// pgx's NamedArgs does.
func numberNamedArgs(sql string) string {
	var b strings.Builder
	numbers := map[string]int{}
	identChar := func(c byte) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(sql) && sql[j] != c {
				j++
			}
			j = min(j+1, len(sql))
			b.WriteString(sql[i:j])
			i = j
		case strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				j = len(sql) - i
			}
			b.WriteString(sql[i : i+j])
			i += j
		case strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i:], "*/")
			if j < 0 {
				j = len(sql) - i - 2
			}
			b.WriteString(sql[i : i+j+2])
			i += j + 2
		case c == '@' && i+1 < len(sql) && identChar(sql[i+1]) && (sql[i+1] < '0' || sql[i+1] > '9'):
			j := i + 1
			for j < len(sql) && identChar(sql[j]) {
				j++
			}
			name := sql[i+1 : j]
			if numbers[name] == 0 {
				numbers[name] = len(numbers) + 1
			}
			fmt.Fprintf(&b, "$%d", numbers[name])
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}
