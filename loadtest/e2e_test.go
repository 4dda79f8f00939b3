package loadtest

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/dispatcher"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The generator against a real API, dispatcher and database in this
// process, for three seconds (again, on a machine too loaded to complete
// anything in that time): it creates its tenants, runs its workers, offers
// closed and open loops of several kinds, and reports what completed. No
// figure is asserted: only that the pieces meet.
func TestRunAgainstAnInProcessServer(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pool := testdb.Pool(t, 20)
	st := crdb.New(pool, crdb.Options{Logger: quiet})
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	const issuer, audience = "https://loadtest.test", "orchard-api"
	minter, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: priv, Issuer: issuer, Audience: audience})
	require.NoError(t, err)
	verifier, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
		Issuer: issuer, Audience: audience, PublicKeys: []crypto.PublicKey{minter.PublicKey()},
	})
	require.NoError(t, err)
	a, err := api.New(api.Config{Store: st, Verifier: verifier, Minter: minter, Logger: quiet, MaxPoll: 20 * time.Millisecond})
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(a.Handler())
	srv.Config.Protocols = api.Protocols()
	srv.Start()
	t.Cleanup(srv.Close)
	d, err := dispatcher.New(dispatcher.Config{Store: st, Logger: quiet, MaxPoll: 10 * time.Millisecond, Loops: 2})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
	admin, err := minter.Mint(tenancy.Claims{Subject: "loadtest-admin", Roles: []tenancy.Role{tenancy.RolePlatformAdmin}}, time.Hour)
	require.NoError(t, err)

	plan, err := ParsePlan([]byte(`
name: e2e
duration: 3s
workers: { count: 1, concurrency: 8 }
tenants:
  - id: lt-one
    limits: { requests_per_second: 10000, burst: 10000 }
    loads:
      - { kind: one-activity, in_flight: 2 }
      - { kind: event, rate: 5 }
  - id: lt-two
    loads:
      - { kind: sub-orchestration, in_flight: 1 }
      - { kind: fan-out, width: 3, in_flight: 1 }
`))
	require.NoError(t, err)
	// A loaded machine may complete nothing in three seconds: run again
	// (the tenants and definitions are reused) until a run completes some.
	var rep *Report
	testwait.Until(t, 3*time.Minute, "a run that completes orchestrations", func() bool {
		rep, err = Run(t.Context(), Config{API: srv.URL, AdminToken: admin, Plan: plan, CPUPids: []int{os.Getpid()}, Logger: quiet})
		require.NoError(t, err)
		return rep.Total.Completed > 0
	})
	require.Len(t, rep.Loads, 4)
	require.Len(t, rep.Tenants, 2)
	require.Empty(t, rep.Total.Errors)
	require.NotEmpty(t, rep.Timeline)
	require.NotNil(t, rep.CPU, "this process's CPU is readable: %v", rep.Notes)

	jsonPath, chartPath, err := rep.Save(t.TempDir())
	require.NoError(t, err)
	require.FileExists(t, jsonPath)
	require.Equal(t, "report.html", filepath.Base(chartPath))
}
