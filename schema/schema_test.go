package schema_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/schema"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), testdb.URL(t)) // already migrated once, as a template
	require.NoError(t, err)
	defer conn.Close(t.Context())

	applied, err := schema.Migrate(t.Context(), conn)
	require.NoError(t, err)
	require.Empty(t, applied, "a migrated database was migrated again")

}

// A migrator stopped before it recorded a migration runs all of that
// migration's statements again: every statement must apply cleanly a
// second time, right after its migration, but those that run in one
// transaction with their record (a rename), which never run twice.
func TestInterruptedMigrationsRunAgain(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, testdb.EmptyURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	cockroach, err := schema.IsCockroach(ctx, conn)
	require.NoError(t, err)
	migrations, err := schema.Migrations(cockroach)
	require.NoError(t, err)
	inTransaction := 0
	for _, m := range migrations {
		applied, err := schema.MigrateOnly(ctx, conn, func(o schema.Migration) bool { return o.Version == m.Version })
		require.NoError(t, err)
		require.Equal(t, []string{m.Version}, applied)
		if m.InTransaction {
			inTransaction++
			continue
		}
		for i, stmt := range m.Statements {
			_, err := conn.Exec(ctx, stmt)
			require.NoError(t, err, "%s, statement %d, run again", m.Version, i+1)
		}
	}
	require.Positive(t, inTransaction)
	applied, err := schema.Migrate(ctx, conn)
	require.NoError(t, err)
	require.Empty(t, applied)
}

// A database migrated by the version before the lease renames (0018 to
// 0024) keeps its leases and tasks under the new names.
func TestOldDatabaseMigratesForward(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, testdb.EmptyURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	const lastOld = "0017_lease_strikes"
	newer := func(m schema.Migration) bool { return !strings.Contains(m.Version, "/") && m.Version > lastOld }
	applied, err := schema.MigrateOnly(ctx, conn, func(m schema.Migration) bool { return !newer(m) })
	require.NoError(t, err)
	require.Contains(t, applied, lastOld)

	const token, task = "6f1c5a52-8a43-4c1e-9a55-2f3d1d1f0a01", "0b0e9b8e-3c2d-4d52-8d0b-1f6f8b7c9a02"
	_, err = conn.Exec(ctx, `INSERT INTO instance_locks (tenant_id, instance_id, lock_token, locked_until, due_at, claims, strikes)
		VALUES ('t', 'i', $1, 5000, 4999, 2, 1)`, token)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO worker_queue (tenant_id, id, instance_id, execution_id, activity_id, name, task_queue,
		visible_at, lock_token, locked_until, created_at) VALUES ('t', $1, 'i', 1, 7, 'a', 'q', 6000, $2, 6000, 1000)`, task, token)
	require.NoError(t, err)

	cockroach, err := schema.IsCockroach(ctx, conn)
	require.NoError(t, err)
	migrations, err := schema.Migrations(cockroach)
	require.NoError(t, err)
	var want []string
	for _, m := range migrations {
		if newer(m) {
			want = append(want, m.Version)
		}
	}
	applied, err = schema.Migrate(ctx, conn)
	require.NoError(t, err)
	require.Equal(t, want, applied)

	var gotToken string
	var until, due, claims, strikes int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT lease_token::TEXT, leased_until, due_at, claims, strikes FROM instance_leases
		WHERE tenant_id = 't' AND instance_id = 'i'`).Scan(&gotToken, &until, &due, &claims, &strikes))
	require.Equal(t, []any{token, int64(5000), int64(4999), int64(2), int64(1)}, []any{gotToken, until, due, claims, strikes})
	require.NoError(t, conn.QueryRow(ctx, `SELECT lease_token::TEXT, leased_until FROM worker_queue
		WHERE tenant_id = 't' AND id = $1`, task).Scan(&gotToken, &until))
	require.Equal(t, []any{token, int64(6000)}, []any{gotToken, until})

	rows, err := conn.Query(ctx, `SELECT table_name || '.' || column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name <> 'schema_migration_lock'
			AND (table_name LIKE '%lock%' OR column_name LIKE '%lock%')`)
	require.NoError(t, err)
	old, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, old, "columns of tables named for locks")
	rows, err = conn.Query(ctx, `SELECT indexname FROM pg_indexes
		WHERE schemaname = current_schema() AND indexname LIKE '%lock%'
			AND indexname <> 'schema_migration_lock_pkey'`)
	require.NoError(t, err)
	old, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, old, "indexes named for locks")
}

func TestDatabaseOnlyMigrationsAreSeparate(t *testing.T) {
	t.Parallel()
	pg, err := schema.Migrations(false)
	require.NoError(t, err)
	crdb, err := schema.Migrations(true)
	require.NoError(t, err)
	// The common migrations come first in both lists, then each kind's own.
	var common []schema.Migration
	for _, m := range pg {
		if !strings.Contains(m.Version, "/") {
			common = append(common, m)
		}
	}
	require.NotEmpty(t, common)
	require.Equal(t, common, pg[:len(common)])
	require.Equal(t, common, crdb[:len(common)])
	require.Greater(t, len(pg), len(common))
	require.Greater(t, len(crdb), len(common))
	for _, m := range pg[len(common):] {
		require.True(t, strings.HasPrefix(m.Version, "pg_only/"), m.Version)
	}
	for _, m := range crdb[len(common):] {
		require.True(t, strings.HasPrefix(m.Version, "crdb_only/"), m.Version)
	}
	for _, m := range common {
		for _, stmt := range m.Statements {
			for _, word := range []string{"USING HASH", "CONFIGURE ZONE", "UPSERT", "AS OF SYSTEM TIME", "SERIAL", "FILLFACTOR"} {
				require.NotContains(t, strings.ToUpper(stmt), word, "%s holds SQL of one database only", m.Version)
			}
		}
	}
}

// Every table of tenants' data is keyed by tenant first. The others are the
// deployment's own: its migrations and the hint members (its processes).
func TestEveryPrimaryKeyStartsWithTenant(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), testdb.URL(t))
	require.NoError(t, err)
	defer conn.Close(t.Context())
	rows, err := conn.Query(t.Context(), `
SELECT tc.table_name, kcu.column_name
FROM information_schema.table_constraints tc
JOIN information_schema.key_column_usage kcu
	ON kcu.constraint_name = tc.constraint_name AND kcu.table_name = tc.table_name
WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = 'public'
	AND kcu.ordinal_position = 1 AND tc.table_name NOT IN ('schema_migrations', 'schema_migration_lock', 'hint_members')`)
	require.NoError(t, err)
	firsts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var pair [2]string
		return pair, r.Scan(&pair[0], &pair[1])
	})
	require.NoError(t, err)
	require.Len(t, firsts, 15)
	for _, f := range firsts {
		require.Equal(t, "tenant_id", f[1], "table %s", f[0])
	}
}

// Migrators started at once (two upgrades racing) apply each migration
// once between them, one after the other, on an empty database.
func TestConcurrentMigrations(t *testing.T) {
	t.Parallel()
	url := testdb.EmptyURL(t)
	const migrators = 4
	results := make(chan []string, migrators)
	errs := make(chan error, migrators)
	start := make(chan struct{})
	for range migrators {
		conn, err := pgx.Connect(t.Context(), url)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		go func() {
			<-start
			applied, err := schema.Migrate(t.Context(), conn)
			results <- applied
			errs <- err
		}()
	}
	close(start)
	seen := map[string]int{}
	for range migrators {
		require.NoError(t, <-errs)
		for _, v := range <-results {
			seen[v]++
		}
	}
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	cockroach, err := schema.IsCockroach(t.Context(), conn)
	require.NoError(t, err)
	want, err := schema.Migrations(cockroach)
	require.NoError(t, err)
	require.Len(t, seen, len(want))
	for v, n := range seen {
		require.Equal(t, 1, n, "migration %s applied by %d migrators", v, n)
	}
	var recorded, locks int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&recorded))
	require.Equal(t, len(want), recorded)
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM schema_migration_lock").Scan(&locks))
	require.Zero(t, locks, "the lock was not released")
}

// A migrator waits for a live lease (until its context ends, naming the
// holder) and takes over an expired one.
func TestMigrationLease(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	_, err = conn.Exec(t.Context(), "INSERT INTO schema_migration_lock (id, holder, expires_at) VALUES (1, 'other-migrator', $1)",
		time.Now().Add(time.Hour).UnixMilli())
	require.NoError(t, err)
	// The waiting migrator has a connection of its own: its deadline may
	// fall during a statement, and pgx then closes the connection.
	waiter, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer waiter.Close(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err = schema.Migrate(ctx, waiter)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "other-migrator")

	_, err = conn.Exec(t.Context(), "UPDATE schema_migration_lock SET expires_at = $1", time.Now().Add(-time.Second).UnixMilli())
	require.NoError(t, err)
	applied, err := schema.Migrate(t.Context(), conn)
	require.NoError(t, err)
	require.Empty(t, applied)
	var locks int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM schema_migration_lock").Scan(&locks))
	require.Zero(t, locks)
}

// The large tables the turns' statements name are vacuumed and analyzed
// late while they are small (pg_only/0003): each vacuum or analyze that
// changes their counts makes every backend plan those statements anew.
// instances is analyzed early again (pg_only/0004): without statistics the
// turns' generic plans read a whole tenant to find an instance. CockroachDB
// has no such options.
func TestHotTablesVacuumLateWhileSmall(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, testdb.URL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	cockroach, err := schema.IsCockroach(ctx, conn)
	require.NoError(t, err)
	want := map[string][]string{
		"instances":       {"autovacuum_vacuum_threshold=10000", "autovacuum_vacuum_insert_threshold=10000"},
		"executions":      {"autovacuum_vacuum_threshold=10000", "autovacuum_vacuum_insert_threshold=10000", "autovacuum_analyze_threshold=10000"},
		"history":         {"autovacuum_vacuum_threshold=10000", "autovacuum_vacuum_insert_threshold=10000", "autovacuum_analyze_threshold=10000"},
		"instance_counts": nil, // vacuumed at every round: see the migration
	}
	for table, options := range want {
		var got []string
		require.NoError(t, conn.QueryRow(ctx, `SELECT COALESCE(reloptions, '{}') FROM pg_class WHERE relname = $1 AND relkind = 'r'`, table).Scan(&got), table)
		if cockroach || options == nil {
			require.NotContains(t, strings.Join(got, ","), "autovacuum", table)
			continue
		}
		for _, o := range options {
			require.Contains(t, got, o, table)
		}
		if table == "instances" {
			require.NotContains(t, strings.Join(got, ","), "autovacuum_analyze", table)
		}
	}
}
