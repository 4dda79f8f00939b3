package testdb

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

func TestEachTestGetsItsOwnMigratedDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := URL(t), URL(t)
	require.NotEqual(t, a, b)

	ca, err := pgx.Connect(ctx, a)
	require.NoError(t, err)
	defer ca.Close(ctx)
	cb, err := pgx.Connect(ctx, b)
	require.NoError(t, err)
	defer cb.Close(ctx)

	_, err = ca.Exec(ctx, "INSERT INTO tenants (tenant_id, created_at, updated_at) VALUES ('acme', 1, 1)")
	require.NoError(t, err)
	var n int
	require.NoError(t, cb.QueryRow(ctx, "SELECT count(*) FROM tenants").Scan(&n))
	require.Zero(t, n, "a write in one test's database is visible in another's")

	var iso string
	require.NoError(t, ca.QueryRow(ctx, "SHOW transaction_isolation").Scan(&iso))
	if !SharedServer(t).Cockroach {
		require.Equal(t, "serializable", iso)
	}
}

func TestCloneCopiesADatabaseOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	src := Pool(t, 2)
	_, err := src.Exec(ctx, "INSERT INTO tenants (tenant_id, created_at, updated_at) VALUES ('acme', 1, 1)")
	require.NoError(t, err)
	srcDB := src.Config().ConnConfig.Database

	a, ok := Clone(t, src, 2)
	require.Equal(t, !SharedServer(t).Cockroach, ok, "Clone works on PostgreSQL alone")
	if !ok {
		require.NoError(t, src.Ping(ctx), "a pool Clone did not copy stays open")
		return
	}
	b, ok := Clone(t, a, 2)
	require.True(t, ok)
	require.NotEqual(t, srcDB, a.Config().ConnConfig.Database)
	require.NotEqual(t, a.Config().ConnConfig.Database, b.Config().ConnConfig.Database)
	var n int
	require.NoError(t, b.QueryRow(ctx, "SELECT count(*) FROM tenants WHERE tenant_id = 'acme'").Scan(&n))
	require.Equal(t, 1, n, "the copy holds the source's rows")
	_, err = b.Exec(ctx, "DELETE FROM tenants")
	require.NoError(t, err)
	again, ok := Clone(t, a, 2)
	require.True(t, ok, "a source may be copied again")
	require.NoError(t, again.QueryRow(ctx, "SELECT count(*) FROM tenants WHERE tenant_id = 'acme'").Scan(&n))
	require.Equal(t, 1, n, "a write to a copy changed its source")
}
