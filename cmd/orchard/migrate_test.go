package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
)

// migrate status fails while migrations are pending, and says the schema is
// up to date once migrate ran.
func TestMigrateStatus(t *testing.T) {
	t.Parallel()
	url := testdb.EmptyURL(t)
	status := func() (string, error) {
		var out bytes.Buffer
		root := rootCommand()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs([]string{"migrate", "status", "--database-url", url})
		err := root.ExecuteContext(t.Context())
		return out.String(), err
	}
	out, err := status()
	require.ErrorContains(t, err, "pending: run orchard migrate")
	require.Contains(t, out, "0001_tables")
	require.Contains(t, out, "pending")

	root := rootCommand()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"migrate", "--database-url", url, "--river-database-url", url})
	require.NoError(t, root.ExecuteContext(t.Context()))
	out, err = status()
	require.NoError(t, err)
	require.Contains(t, out, "schema is up to date")
	require.NotContains(t, out, "pending")
}
