package dispatcher_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The dispatcher reads tenants' limits from the store and never verifies a
// token: only the API does, so the JWT package stays out of it.
func TestDispatcherLinksNoTokenCode(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "this test lists the package's dependencies with the go command")
	out, err := exec.CommandContext(t.Context(), goBin, "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/orchardhq/orchard/pkg/store", "the list should hold the package's dependencies")
	require.NotContains(t, deps, "github.com/orchardhq/orchard/pkg/tenancy")
	for _, dep := range deps {
		require.False(t, strings.HasPrefix(dep, "github.com/golang-jwt/"), "services/dispatcher links %s", dep)
	}
}
