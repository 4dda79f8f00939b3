package procs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

// A process stopped with Kill is no unexpected exit; one that exits on
// its own is counted, and RestartIfExited starts it again.
func TestProcessCountsTheExitsNobodyAskedFor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sleeper := New("sleeper", filepath.Join(dir, "sleeper.log"), "sleep", "60")
	require.NoError(t, sleeper.Start())
	require.NotZero(t, sleeper.Pid())
	sleeper.Kill(syscall.SIGTERM, 10*time.Second)
	exits, _ := sleeper.Exits()
	require.Zero(t, exits)
	restarted, err := sleeper.RestartIfExited()
	require.NoError(t, err)
	require.False(t, restarted, "a killed process is started again by whoever killed it")

	quitter := New("quitter", filepath.Join(dir, "quitter.log"), "sh", "-c", "echo bye; exit 3")
	require.NoError(t, quitter.Start())
	testwait.Until(t, time.Minute, "the quitter to exit", func() bool { n, _ := quitter.Exits(); return n == 1 })
	_, last := quitter.Exits()
	require.Contains(t, last, "exit status 3")
	restarted, err = quitter.RestartIfExited()
	require.NoError(t, err)
	require.True(t, restarted)
	testwait.Until(t, time.Minute, "the quitter to exit again", func() bool { n, _ := quitter.Exits(); return n == 2 })
	log, err := os.ReadFile(filepath.Join(dir, "quitter.log"))
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(log), "bye"), "both starts log to the same file")
}

// The admin token NewKeys mints verifies with the public key it wrote, for
// the issuer and audience given; the secret differs from one call to the next.
func TestKeysVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, err := NewKeys(dir, "iss", "aud", "tester")
	require.NoError(t, err)
	pub, err := os.ReadFile(k.PublicFile)
	require.NoError(t, err)
	keys, err := tenancy.ParsePublicKeysPEM(pub)
	require.NoError(t, err)
	v, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{Issuer: "iss", Audience: "aud", PublicKeys: keys})
	require.NoError(t, err)
	id, err := v.Verify(t.Context(), k.AdminToken)
	require.NoError(t, err)
	require.Equal(t, "tester", id.Subject)
	require.Equal(t, []tenancy.Role{tenancy.RolePlatformAdmin}, id.Roles)
	_, err = os.Stat(k.PrivateFile)
	require.NoError(t, err)

	other, err := NewKeys(t.TempDir(), "iss", "aud", "tester")
	require.NoError(t, err)
	require.Len(t, k.Secret, 64)
	require.NotEqual(t, k.Secret, other.Secret)
}
