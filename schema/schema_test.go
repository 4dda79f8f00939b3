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

	// Forget the versions: every statement must still apply cleanly.
	_, err = conn.Exec(t.Context(), "DELETE FROM schema_migrations")
	require.NoError(t, err)
	applied, err = schema.Migrate(t.Context(), conn)
	require.NoError(t, err)
	cockroach, err := schema.IsCockroach(t.Context(), conn)
	require.NoError(t, err)
	want, err := schema.Migrations(cockroach)
	require.NoError(t, err)
	require.Len(t, applied, len(want))
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
	AND kcu.ordinal_position = 1 AND tc.table_name NOT IN ('schema_migrations', 'schema_migration_lock')`)
	require.NoError(t, err)
	firsts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var pair [2]string
		return pair, r.Scan(&pair[0], &pair[1])
	})
	require.NoError(t, err)
	require.Len(t, firsts, 14)
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
