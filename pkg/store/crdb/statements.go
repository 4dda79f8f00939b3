package crdb

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The store's statements live whole, one per name, in sql/*.sql: a line
// "-- name: Name" starts a statement, which runs to the next such line or
// the end of the file. Parameters are named (@tenant_id) and bound with
// namedArgs, which fails on a name missing from either side.
// They are read at start-up into package variables (stmt), so a name that
// no file defines stops every test of the package at once, and
// TestStatementsAllUsed fails on a statement no code names.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// namedArgs binds a statement's named parameters (@name) by name, as
// pgx.StrictNamedArgs does (a name missing from either side is an error),
// but turns each statement into its positional form ($1...) once, not at
// every call: the rewrite lexes the whole statement, comments included,
// and doubled the bytes the runtime's calls allocate.
type namedArgs map[string]any

// positional is a statement's positional form and its parameters' names,
// in order, with those the statement casts to UUID[].
type positional struct {
	sql       string
	names     []string
	uuidArray []bool
}

// uuidArrayParam finds the parameters a statement casts to UUID[], which
// must be bound with uuidArray.
var uuidArrayParam = regexp.MustCompile(`(?i)@([a-z_][a-z0-9_]*)::UUID\[\]`)

// positionals caches positional forms by statement text. The texts are
// the named statements and the shapes of the filter builder, a set fixed
// by the code, so it stays small.
var positionals sync.Map

// nameMark stands for a parameter's value while pgx lexes a statement
// once, so that its result says which name each ordinal has.
type nameMark string

// RewriteQuery implements pgx.QueryRewriter.
func (na namedArgs) RewriteQuery(ctx context.Context, conn *pgx.Conn, sql string, args []any) (string, []any, error) {
	v, ok := positionals.Load(sql)
	if !ok {
		marks := make(pgx.StrictNamedArgs, len(na))
		for name := range na {
			marks[name] = nameMark(name)
		}
		posSQL, ordered, err := marks.RewriteQuery(ctx, conn, sql, args)
		if err != nil {
			return "", nil, err
		}
		uuids := map[string]bool{}
		for _, m := range uuidArrayParam.FindAllStringSubmatch(sql, -1) {
			uuids[m[1]] = true
		}
		p := &positional{sql: posSQL, names: make([]string, len(ordered)), uuidArray: make([]bool, len(ordered))}
		for i, m := range ordered {
			p.names[i] = string(m.(nameMark))
			p.uuidArray[i] = uuids[p.names[i]]
		}
		v, _ = positionals.LoadOrStore(sql, p)
	}
	p := v.(*positional)
	out := make([]any, len(p.names))
	for i, name := range p.names {
		value, found := na[name]
		if !found {
			return "", nil, fmt.Errorf("argument %s found in sql query but not present in namedArgs", name)
		}
		if _, isStrings := value.([]string); isStrings && p.uuidArray[i] {
			return "", nil, fmt.Errorf("argument %s is a UUID[]: bind it with uuidArray, not as []string", name)
		}
		out[i] = value
	}
	if len(na) != len(p.names) {
		return "", nil, fmt.Errorf("namedArgs binds %d names, the statement uses %d (%s)", len(na), len(p.names), strings.Join(p.names, ", "))
	}
	return p.sql, out, nil
}

// statements maps each name to its statement.
var statements = mustParseStatements(sqlFiles)

// used records the names the code asked for (stmt), for
// TestStatementsAllUsed.
var used = map[string]bool{}

// stmt returns the named statement; it panics (at package initialisation,
// where it is called) when no file defines it.
func stmt(name string) string {
	sql, ok := statements[name]
	if !ok {
		panic(fmt.Sprintf("crdb: no statement named %q in sql/*.sql", name))
	}
	used[name] = true
	return sql
}

func mustParseStatements(fsys fs.FS) map[string]string {
	out, err := parseStatements(fsys)
	if err != nil {
		panic(err)
	}
	return out
}

const nameHeader = "-- name: "

// parseStatements reads every sql/*.sql file of fsys into a map of
// statements by name. The comments before the first header of a file are
// about the file; a statement keeps the comment lines that follow its
// header (they are sent along, and say why it is written as it is).
func parseStatements(fsys fs.FS) (map[string]string, error) {
	files, err := fs.Glob(fsys, "sql/*.sql")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, file := range files {
		body, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		var name string
		var sql strings.Builder
		flush := func() error {
			if name == "" {
				return nil
			}
			text := strings.TrimSpace(sql.String())
			text = strings.TrimSpace(strings.TrimSuffix(text, ";"))
			if onlyComments(text) {
				return fmt.Errorf("%s: statement %s is empty", file, name)
			}
			if _, dup := out[name]; dup {
				return fmt.Errorf("%s: statement %s is defined twice", file, name)
			}
			out[name] = text
			return nil
		}
		for line := range strings.Lines(string(body)) {
			if rest, ok := strings.CutPrefix(line, nameHeader); ok {
				if err := flush(); err != nil {
					return nil, err
				}
				name = strings.TrimSpace(rest)
				sql.Reset()
				continue
			}
			if name != "" {
				sql.WriteString(line)
			}
		}
		if err := flush(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func onlyComments(text string) bool {
	for line := range strings.Lines(text) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "--") {
			return false
		}
	}
	return true
}

// column is one column of rows, to bind as an array parameter that the
// statement reads back with its other columns by unnest: the rows are
// built once, as structs, and each column is taken from them, so the
// arrays cannot fall out of step.
func column[R, V any](rows []R, value func(R) V) []V {
	out := make([]V, len(rows))
	for i, r := range rows {
		out[i] = value(r)
	}
	return out
}

// uuidArray is the UUIDs ss as an array parameter. pgx sends a Go string
// for a scalar UUID parameter as text, but tries a []string for a UUID[]
// in binary first, which fails and formats an error naming every element,
// then sends it as text: on the ack of a batch of turns that cost more than
// the parameters themselves. A string that is not a UUID is NULL, which no
// row's UUID equals.
func uuidArray(ss []string) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ss))
	for i, s := range ss {
		_ = out[i].Scan(s)
	}
	return out
}
