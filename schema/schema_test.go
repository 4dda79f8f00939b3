package schema_test

import (
	"strings"
	"testing"

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
	AND kcu.ordinal_position = 1 AND tc.table_name <> 'schema_migrations'`)
	require.NoError(t, err)
	firsts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var pair [2]string
		return pair, r.Scan(&pair[0], &pair[1])
	})
	require.NoError(t, err)
	require.Len(t, firsts, 12)
	for _, f := range firsts {
		require.Equal(t, "tenant_id", f[1], "table %s", f[0])
	}
}
