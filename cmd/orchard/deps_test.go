package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The orchard binary links no test code: `orchard dev` starts its database
// through internal/dbserver, not through the tests' internal/testdb.
func TestBinaryLinksNoTestCode(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "this test lists the binary's dependencies with the go command")
	out, err := exec.CommandContext(t.Context(), goBin, "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/orchardhq/orchard/internal/dbserver", "the list should hold the binary's dependencies")
	for _, dep := range deps {
		forbidden := dep == "testing" || strings.HasPrefix(dep, "testing/") ||
			strings.HasPrefix(dep, "github.com/stretchr/testify") ||
			strings.HasPrefix(dep, "github.com/orchardhq/orchard/internal/test")
		require.False(t, forbidden, "cmd/orchard links %s", dep)
	}
}
