package schema_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/schema"
)

// A database never migrated has every migration pending (and Status creates
// nothing); after Migrate none is; a forgotten version is pending again.
func TestStatus(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), testdb.EmptyURL(t))
	require.NoError(t, err)
	defer conn.Close(t.Context())
	cockroach, err := schema.IsCockroach(t.Context(), conn)
	require.NoError(t, err)
	want, err := schema.Migrations(cockroach)
	require.NoError(t, err)

	st, err := schema.Status(t.Context(), conn)
	require.NoError(t, err)
	require.Len(t, st, len(want))
	for i, m := range st {
		require.Equal(t, want[i].Version, m.Version)
		require.True(t, m.Pending(), m.Version)
	}
	var tables int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`).Scan(&tables))
	require.Zero(t, tables, "Status created a table")

	_, err = schema.Migrate(t.Context(), conn)
	require.NoError(t, err)
	st, err = schema.Status(t.Context(), conn)
	require.NoError(t, err)
	for _, m := range st {
		require.False(t, m.Pending(), m.Version)
	}

	_, err = conn.Exec(t.Context(), "DELETE FROM schema_migrations WHERE version = $1", want[len(want)-1].Version)
	require.NoError(t, err)
	st, err = schema.Status(t.Context(), conn)
	require.NoError(t, err)
	require.True(t, st[len(st)-1].Pending())
	require.False(t, st[0].Pending())
}
