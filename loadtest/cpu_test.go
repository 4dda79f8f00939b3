package loadtest

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testwait"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	// A command name with a space and a parenthesis; utime 150, stime 50,
	// cutime 20, cstime 30 ticks.
	p, err := parseProcStat("4242 (postgres: a) b) S 4200 4242 4242 0 -1 4194560 1 0 0 0 150 50 20 30 20 0 1 0 100 1000 10")
	require.NoError(t, err)
	require.Equal(t, procStat{pid: 4242, ppid: 4200, comm: "postgres: a) b", cpu: 2500 * time.Millisecond}, p)
	_, err = parseProcStat("4242 postgres S 1")
	require.Error(t, err)
	_, err = parseProcStat("4242 (x) S 1 2 3")
	require.Error(t, err)
}

func TestParseMachineStat(t *testing.T) {
	t.Parallel()
	// Two CPUs; idle 400 and iowait 50, steal 30 of 1,000 ticks in all
	// (the guest times after steal are within user and nice).
	m, err := parseMachineStat(`cpu  300 20 150 400 50 10 40 30 7 0
cpu0 150 10 75 200 25 5 20 15 7 0
cpu1 150 10 75 200 25 5 20 15 0 0
intr 12345 0 0
ctxt 999
`)
	require.NoError(t, err)
	require.Equal(t, machineTicks{cpus: 2, total: 1000, idle: 450, stolen: 30}, m)
	_, err = parseMachineStat("cpu0 1 2 3 4 5 6 7 8\n")
	require.Error(t, err, "no cpu line")
	_, err = parseMachineStat("cpu 1 2 3 4\ncpu0 1 2 3 4 5 6 7 8\n")
	require.Error(t, err, "short cpu line")
	_, err = parseMachineStat("cpu 1 2 3 x 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\n")
	require.Error(t, err, "not a number")

	// Over a window, the machine's ticks give its idle and stolen cores.
	before := cpuSample{machine: machineTicks{cpus: 2, total: 1000, idle: 400, stolen: 100}}
	after := cpuSample{orchard: time.Second, database: time.Second, machine: machineTicks{cpus: 2, total: 2000, idle: 600, stolen: 350}}
	r := cpuReport([]int{10}, before, after, time.Second, 10)
	require.Equal(t, 2, r.MachineCores)
	require.InDelta(t, 0.4, r.IdleCores, 1e-9)
	require.InDelta(t, 0.5, r.StolenCores, 1e-9)
}

func TestProcessCPUGrowsWithWork(t *testing.T) {
	t.Parallel()
	before, err := ProcessCPU(os.Getpid())
	require.NoError(t, err)
	// Work until the kernel has charged this process (and so this test,
	// or another running beside it) a tick more.
	x := 1
	testwait.Until(t, time.Minute, "the process's CPU time to grow", func() bool {
		for i := range 1_000_000 {
			x = x*31 + i
		}
		after, err := ProcessCPU(os.Getpid())
		require.NoError(t, err)
		return after > before
	})
	require.NotZero(t, x)
	_, err = ProcessCPU(-1)
	require.Error(t, err)
}

func TestSumTreesSplitsTheDatabase(t *testing.T) {
	t.Parallel()
	procs := []procStat{
		{pid: 10, ppid: 1, comm: "orchard", cpu: 3 * time.Second},
		{pid: 11, ppid: 10, comm: "postgres", cpu: 2 * time.Second},
		{pid: 12, ppid: 11, comm: "postgres", cpu: time.Second},
		{pid: 20, ppid: 1, comm: "postgres", cpu: time.Hour},       // another server's
		{pid: 13, ppid: 10, comm: "orchard", cpu: 4 * time.Second}, // the generator, run by the server
	}
	require.Equal(t, cpuSample{orchard: 3 * time.Second, database: 3 * time.Second, generator: 4 * time.Second}, sumTrees(procs, []int{10, 10}, 13))
	r := cpuReport([]int{10}, cpuSample{}, cpuSample{orchard: time.Second, database: 2 * time.Second, generator: time.Second}, 2*time.Second, 100)
	require.InDelta(t, 0.5, r.OrchardCores, 1e-9)
	require.InDelta(t, 1.0, r.DatabaseCores, 1e-9)
	require.InDelta(t, 0.5, r.GeneratorCores, 1e-9)
	require.InDelta(t, 10, r.OrchardMillisPerOrchestration, 1e-9)
	require.InDelta(t, 20, r.DatabaseMillisPerOrchestration, 1e-9)
	require.InDelta(t, 10, r.GeneratorMillisPerOrchestration, 1e-9)
}
