// Package schema holds Orchard's SQL migrations and the migrator that applies
// them. The common migrations use only SQL that both CockroachDB and PostgreSQL
// accept (DESIGN §3); the files under crdb_only/ are applied only when the
// server reports CockroachDB, those under pg_only/ only when it does not.
// Every statement is idempotent and runs on its own, because CockroachDB
// commits DDL outside the surrounding transaction. The one exception is a statement that cannot be written to run twice (a
// rename): it is the only statement of its file, which says so with the
// line "-- migrate: one transaction", and it runs in one transaction with
// the record of its version, so an interrupted migrator leaves both or
// neither.
//
// The migrator never drops data. It holds a lease in the database while it
// runs (see lock.go), so migrators started at once run one after the other,
// on CockroachDB as on PostgreSQL; re-running it is always safe.
package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql crdb_only/*.sql pg_only/*.sql
var files embed.FS

// Conn is what the migrator needs of a connection or pool.
type Conn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migration is one file of statements.
type Migration struct {
	// Version names the migration in the version table: "0001_tables" for the
	// common set, "crdb_only/0001_queue_tuning" for CockroachDB's extras,
	// "pg_only/0001_fillfactor" for PostgreSQL's.
	Version    string
	Statements []string
	// InTransaction says the one statement runs in one transaction with
	// the record of the version (the file's line oneTransaction).
	InTransaction bool
}

// oneTransaction is the line of a migration file whose one statement must
// not run twice: see the package comment.
const oneTransaction = "-- migrate: one transaction"

// Migrations lists the migrations that apply to a server, in order: the
// common ones, then the extras of its kind.
func Migrations(cockroach bool) ([]Migration, error) {
	dirs := []string{"migrations", "pg_only"}
	if cockroach {
		dirs[1] = "crdb_only"
	}
	var out []Migration
	for _, dir := range dirs {
		entries, err := fs.ReadDir(files, dir)
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, name := range names {
			body, err := fs.ReadFile(files, path.Join(dir, name))
			if err != nil {
				return nil, err
			}
			version := strings.TrimSuffix(name, ".sql")
			if dir != "migrations" {
				version = dir + "/" + version
			}
			m := Migration{Version: version, Statements: splitStatements(string(body))}
			for line := range strings.Lines(string(body)) {
				m.InTransaction = m.InTransaction || strings.TrimSpace(line) == oneTransaction
			}
			if m.InTransaction && len(m.Statements) != 1 {
				return nil, fmt.Errorf("migration %s: %q needs exactly one statement, got %d", version, oneTransaction, len(m.Statements))
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// splitStatements cuts a file at the semicolons that end a line. Migrations
// hold no semicolons inside strings, so nothing smarter is needed.
func splitStatements(body string) []string {
	var stmts []string
	var cur strings.Builder
	for line := range strings.SplitSeq(body, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(trimmed, ";") {
			stmts = append(stmts, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		stmts = append(stmts, s)
	}
	return stmts
}

// IsCockroach reports whether the server behind conn is CockroachDB.
func IsCockroach(ctx context.Context, conn Conn) (bool, error) {
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return false, fmt.Errorf("read server version: %w", err)
	}
	return strings.Contains(version, "CockroachDB"), nil
}

// Migrate applies every migration that the version table does not list yet
// and returns the versions it applied. It waits for a migrator running at
// the same time to finish first (until ctx ends).
func Migrate(ctx context.Context, conn Conn) ([]string, error) {
	return migrate(ctx, conn, nil)
}

// migrate applies the migrations that keep accepts (all when keep is nil)
// and the version table does not list yet.
func migrate(ctx context.Context, conn Conn, keep func(Migration) bool) (_ []string, err error) {
	cockroach, err := IsCockroach(ctx, conn)
	if err != nil {
		return nil, err
	}
	if err := createTables(ctx, conn); err != nil {
		return nil, err
	}
	l, err := acquireLock(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer func() {
		// Released even when ctx ended; a release that fails leaves a
		// lease that expires.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = errors.Join(err, l.release(rctx))
	}()
	migrations, err := Migrations(cockroach)
	if err != nil {
		return nil, err
	}
	if keep != nil {
		migrations = slices.DeleteFunc(migrations, func(m Migration) bool { return !keep(m) })
	}
	return migrateLocked(ctx, conn, l, migrations, cockroach)
}

// migrateLocked applies those of migrations not applied yet, holding l.
func migrateLocked(ctx context.Context, conn Conn, l *lease, migrations []Migration, cockroach bool) ([]string, error) {
	applied := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	for _, v := range versions {
		applied[v] = true
	}
	var done []string
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		if m.InTransaction {
			if err := l.renew(ctx); err != nil {
				return done, err
			}
			if err := applyInTransaction(ctx, conn, m, cockroach); err != nil {
				return done, err
			}
			done = append(done, m.Version)
			continue
		}
		for i, stmt := range m.Statements {
			if err := l.renew(ctx); err != nil {
				return done, err
			}
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return done, fmt.Errorf("migration %s, statement %d: %w", m.Version, i+1, err)
			}
		}
		if err := record(ctx, conn, m.Version); err != nil {
			return done, err
		}
		done = append(done, m.Version)
	}
	return done, nil
}

// record adds a version to the version table.
func record(ctx context.Context, conn Conn, version string) error {
	if _, err := conn.Exec(ctx,
		"INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2) ON CONFLICT (version) DO NOTHING",
		version, time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("record migration %s: %w", version, err)
	}
	return nil
}

// applyInTransaction runs a migration's one statement and the record of
// its version in one transaction. CockroachDB (from 25.1) commits an
// explicit transaction before a schema change by default
// (autocommit_before_ddl), which would run them apart: the transaction
// turns that off for itself.
func applyInTransaction(ctx context.Context, conn Conn, m Migration, cockroach bool) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if cockroach {
			if _, err := tx.Exec(ctx, "SET LOCAL autocommit_before_ddl = false"); err != nil {
				return fmt.Errorf("migration %s: %w", m.Version, err)
			}
		}
		if _, err := tx.Exec(ctx, m.Statements[0]); err != nil {
			return fmt.Errorf("migration %s: %w", m.Version, err)
		}
		return record(ctx, tx, m.Version)
	})
}
