package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testlog"
)

// migrate status fails while migrations are pending, and says the schema is
// up to date once migrate ran.
func TestMigrateStatus(t *testing.T) {
	t.Parallel()
	url := testdb.EmptyURL(t)
	status := func() (string, error) {
		// Synchronized: the command makes the process's default logger
		// write to its stderr, where other tests' servers may log while it
		// runs (see cliSystem.runIn).
		var out testlog.Buffer
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
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"migrate", "--database-url", url, "--river-database-url", url})
	require.NoError(t, root.ExecuteContext(t.Context()))
	out, err = status()
	require.NoError(t, err)
	require.Contains(t, out, "schema is up to date")
	require.NotContains(t, out, "pending")
}
