package loadtest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The generator against a real API, dispatcher and database in this
// process, for three seconds (again, on a machine too loaded to complete
// anything in that time): it creates its tenants, runs its workers, offers
// closed and open loops of several kinds, and reports what completed. No
// figure is asserted: only that the pieces meet.
func TestRunAgainstAnInProcessServer(t *testing.T) {
	t.Parallel()
	quiet := testsystem.Quiet()
	s := testsystem.New(t, testsystem.Options{Dispatchers: 1})
	admin := s.Token(t, "", tenancy.RolePlatformAdmin)

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
      - { kind: sub-orchestration, rate: 5 }
      - { kind: fan-out, width: 3, rate: 5 }
`))
	require.NoError(t, err)
	// lt-two keeps the default limits, so its loads are open loops well
	// within the default request rate: closed loops on a fast machine
	// passed it, and had calls refused.
	// A loaded machine may complete nothing in three seconds: run again
	// (the tenants and definitions are reused) until a run completes some.
	var rep *Report
	testwait.Until(t, 3*time.Minute, "a run that completes orchestrations", func() bool {
		rep, err = Run(t.Context(), Config{API: s.URL, AdminToken: admin, Plan: plan, CPUPids: []int{os.Getpid()}, Logger: quiet})
		require.NoError(t, err)
		return rep.Total.Completed > 0
	})
	require.Len(t, rep.Loads, 4)
	require.Len(t, rep.Tenants, 2)
	require.Empty(t, rep.Total.Errors)
	require.NotEmpty(t, rep.Timeline)
	require.NotNil(t, rep.CPU, "this process's CPU is readable: %v", rep.Notes)
	require.Positive(t, rep.CPU.MachineCores, "the machine's CPU is read too")
	require.LessOrEqual(t, rep.CPU.IdleCores+rep.CPU.StolenCores, float64(rep.CPU.MachineCores)+1e-9)

	jsonPath, chartPath, err := rep.Save(t.TempDir())
	require.NoError(t, err)
	require.FileExists(t, jsonPath)
	require.Equal(t, "report.html", filepath.Base(chartPath))
}
