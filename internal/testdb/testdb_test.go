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
