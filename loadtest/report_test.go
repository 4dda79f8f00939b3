package loadtest

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// TestP99RestsOn: the note names the sample HdrHistogram takes as the p99.
func TestP99RestsOn(t *testing.T) {
	t.Parallel()
	for _, n := range []int64{1, 10, 150, 999} {
		h := newHistogram()
		for i := int64(1); i <= n; i++ {
			require.NoError(t, h.RecordValue(i))
		}
		require.Equal(t, h.ValueAtQuantile(99), p99Rank(n), "n=%d", n)
	}
	require.Equal(t, []string{"1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "102nd"},
		[]string{ordinal(1), ordinal(2), ordinal(3), ordinal(4), ordinal(11), ordinal(12), ordinal(13), ordinal(21), ordinal(102)})
}

func TestReportSumsLoadsAndTenants(t *testing.T) {
	t.Parallel()
	plan, err := ParsePlan([]byte(`
tenants:
  - id: a
    loads:
      - { kind: one-activity, in_flight: 2 }
      - { kind: continue-as-new, generations: 5, rate: 1 }
  - id: b
    loads:
      - { kind: one-activity, rate: 3 }
`))
	require.NoError(t, err)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := NewRecorder(start, start.Add(10*time.Second))
	for i := range 10 {
		r.Record("a", "one-activity", start.Add(time.Duration(i)*time.Second), time.Duration(i+1)*time.Millisecond, nil)
	}
	r.Record("a", "continue-as-new", start.Add(time.Second), 100*time.Millisecond, nil)
	r.Record("a", "continue-as-new", start.Add(time.Second), 0, &startedError{&endedError{status: "Failed"}})
	r.Record("b", "one-activity", start.Add(time.Second), 0, &sdk.Error{Code: connect.CodeResourceExhausted})
	r.Record("b", "one-activity", start.Add(time.Second), 5*time.Millisecond, nil)
	rep := buildReport(r, plan, 10)
	require.Len(t, rep.Loads, 3)
	one, can := rep.Loads[0], rep.Loads[1]
	require.Equal(t, int64(10), one.Completed)
	require.InDelta(t, 1.0, one.Throughput, 1e-9)
	require.InDelta(t, 5.0, one.Latency.P50, 0.01)
	require.InDelta(t, 10.0, one.Latency.Max, 0.01)
	require.Equal(t, float64(2), one.Offered)
	require.InDelta(t, 0.5, can.Generations, 1e-9, "0.1 chains/s of 5 generations")
	require.Equal(t, map[string]int64{"ended_Failed": 1}, can.Errors)
	require.Equal(t, int64(11), rep.Tenants[0].Completed)
	require.Equal(t, int64(1), rep.Tenants[1].Completed)
	require.Equal(t, int64(12), rep.Total.Completed)
	require.Equal(t, int64(2), can.Started, "the failed chain started")
	require.Equal(t, []int64{12, 1}, []int64{rep.Tenants[0].Started, rep.Tenants[1].Started}, "b's refused start is not one")
	require.Equal(t, int64(13), rep.Total.Started)
	require.Equal(t, map[string]int64{"ended_Failed": 1, "resource_exhausted": 1}, rep.Total.Errors)
	require.Len(t, rep.Timeline, 10+1+1)
	require.Equal(t, []string{
		"a's p99 rests on 11 orchestrations: its 1st slowest; a run long or busy enough for 1000 gives a steadier tail",
		"b's p99 rests on 1 orchestration: its 1st slowest; a run long or busy enough for 1000 gives a steadier tail",
	}, rep.Notes)

	var sb strings.Builder
	require.NoError(t, rep.WriteSummary(&sb))
	require.Contains(t, sb.String(), "ended_Failed=1")
	require.Contains(t, sb.String(), "(0 gen/s)") // 0.5 rounds to 0
	require.Contains(t, sb.String(), "3/s")
	require.NotContains(t, sb.String(), "server CPU", "no CPU was read")

	rep.CPU = &CPUReport{OrchardCores: 0.5, DatabaseCores: 0.75, MachineCores: 2, IdleCores: 0.25, StolenCores: 0.125}
	sb.Reset()
	require.NoError(t, rep.WriteSummary(&sb))
	require.Contains(t, sb.String(), "server CPU: orchard 0.50 cores, database 0.75 cores")
	require.Contains(t, sb.String(), "machine: 2 cores, 0.25 idle, 0.12 taken by its host (steal)")

	dir := t.TempDir()
	jsonPath, chartPath, err := rep.Save(dir)
	require.NoError(t, err)
	data, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var back Report
	require.NoError(t, json.Unmarshal(data, &back))
	require.Equal(t, rep.Total.Completed, back.Total.Completed)
	chart, err := os.ReadFile(chartPath)
	require.NoError(t, err)
	require.Contains(t, string(chart), "a/one-activity p99")
}

func TestReportComparesTheOnAndOffWindows(t *testing.T) {
	t.Parallel()
	plan, err := ParsePlan([]byte(`
cycle: 10s
tenants:
  - id: quiet
    loads:
      - { kind: one-activity, rate: 1 }
  - id: noisy
    loads:
      - { kind: one-activity, rate: 100, on_off: true }
`))
	require.NoError(t, err)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := NewRecorder(t0, t0.Add(40*time.Second))
	r.splitByWindow(t0, 10*time.Second)
	for s := range 40 {
		// 10 ms while the noisy load is off, 12 ms while it is on, 50 ms
		// in the first second it is on.
		latency := 10 * time.Millisecond
		switch {
		case (s/10)%2 == 1 && s%10 == 0:
			latency = 50 * time.Millisecond
		case (s/10)%2 == 1:
			latency = 12 * time.Millisecond
		}
		due := t0.Add(time.Duration(s)*time.Second + 100*time.Millisecond)
		r.Record("quiet", "one-activity", due.Add(latency), latency, nil)
		r.Record("noisy", "one-activity", due.Add(latency), latency, nil)
	}
	rep := buildReport(r, plan, 40)
	quiet := rep.Tenants[0]
	require.NotNil(t, quiet.Windows)
	require.Equal(t, rep.Loads[0].Windows, quiet.Windows)
	// The first second of each window is left out: 9 of each 10.
	require.Equal(t, int64(18), quiet.Windows.On.Completed)
	require.Equal(t, int64(18), quiet.Windows.Off.Completed)
	require.InDelta(t, 12.0, quiet.Windows.On.Latency.P99, 0.01)
	require.InDelta(t, 10.0, quiet.Windows.Off.Latency.P99, 0.01)
	require.InDelta(t, 0.2, quiet.Windows.P99Change(), 0.002)
	require.Equal(t, int64(2), quiet.Windows.Onset.Completed, "the first second of each on window, apart")
	require.InDelta(t, 50.0, quiet.Windows.Onset.Latency.P99, 0.05)
	require.Nil(t, rep.Loads[1].Windows, "the on/off load itself is not split")
	require.Nil(t, rep.Tenants[1].Windows)

	var sb strings.Builder
	require.NoError(t, rep.WriteSummary(&sb))
	require.Contains(t, sb.String(), "quiet while the on/off loads ran: p50 12.0 ms, p99 12.0 ms (18 due); while they did not: p50 10.0 ms, p99 10.0 ms (18 due); p99 +20%; in the first 1s of their turns, left out: p99 50.0 ms (2 due)\n")
	require.NotContains(t, sb.String(), "noisy while")
	for _, n := range rep.Notes {
		require.NotContains(t, n, "no latency in both")
	}

	// A run too short for an on window says so.
	short := NewRecorder(t0, t0.Add(5*time.Second))
	short.splitByWindow(t0, 10*time.Second)
	short.Record("quiet", "one-activity", t0.Add(2*time.Second), time.Millisecond, nil)
	rep = buildReport(short, plan, 5)
	require.Nil(t, rep.Tenants[0].Windows)
	require.Contains(t, rep.Notes, "quiet has no latency in both on and off windows (each counted from 1s into it): "+
		"the measured window must span an on and an off window of the cycle (10s) well past their starts")
}

// TestP99ChangeCIResamplesCycles: the interval of the p99's change covers
// no change when the on and off windows differ only by which of them
// happened to hold a slow spell, excludes it when every on window is
// slower, and is left out with too few cycles to resample.
func TestP99ChangeCIResamplesCycles(t *testing.T) {
	t.Parallel()
	// cycles of 100 latencies a window, 10 ms, but for a slow spell of 5
	// at 40 ms in the windows slow picks.
	byWindow := func(cycles int, slow func(n int) bool, onFactor int64) map[int][]int64 {
		w := map[int][]int64{}
		for n := range 2 * cycles {
			for i := range int64(100) {
				v := 10_000 + i
				if slow(n) && i < 5 {
					v = 40_000 + i
				}
				if onWindow(n) {
					v *= onFactor
				}
				w[n] = append(w[n], v)
			}
		}
		return w
	}
	// Spells in the off window of cycles 0 and 3 and the on window of
	// cycles 1 and 4, of 12: the p99 of each side rests on its spells.
	spells := func(n int) bool { return n == 0 || n == 6 || n == 3 || n == 9 }
	chance := windowsOf(byWindow(12, spells, 1), nil)
	require.NotNil(t, chance.P99ChangeCI)
	lo, hi := chance.P99ChangeCI[0], chance.P99ChangeCI[1]
	require.Less(t, lo, 0.0, "chance")
	require.Greater(t, hi, 0.0, "chance")
	require.Equal(t, chance.P99ChangeCI, windowsOf(byWindow(12, spells, 1), nil).P99ChangeCI, "the same latencies, the same interval")

	slower := windowsOf(byWindow(12, func(int) bool { return false }, 2), nil)
	require.InDelta(t, 1.0, slower.P99Change(), 0.01)
	require.Greater(t, slower.P99ChangeCI[0], 0.5, "every on window twice as slow")
	require.Contains(t, slower.P99ChangeString(), "+100% (90% CI +")

	require.Nil(t, windowsOf(byWindow(minCycles-1, spells, 1), nil).P99ChangeCI)
	require.Equal(t, "+0%", windowsOf(byWindow(minCycles-1, spells, 1), nil).P99ChangeString())
}
