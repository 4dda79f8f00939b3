package loadtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBuiltInPlansParse(t *testing.T) {
	t.Parallel()
	require.Contains(t, Plans(), "standard")
	for _, name := range Plans() {
		p, err := LoadPlanFile(name)
		require.NoError(t, err, name)
		require.Equal(t, name, p.Name)
	}
}

func TestParsePlanDefaults(t *testing.T) {
	t.Parallel()
	p, err := ParsePlan([]byte(`
tenants:
  - id: a
    loads:
      - { kind: fan-out, rate: 2 }
      - { kind: continue-as-new, name: chains, in_flight: 3 }
`))
	require.NoError(t, err)
	require.Equal(t, Duration(60*time.Second), p.Duration)
	require.Zero(t, p.Warmup, "absent warmup is none")
	require.Equal(t, WorkerPlan{Count: 4, Concurrency: 32}, p.Workers)
	fan, chains := p.Tenants[0].Loads[0], p.Tenants[0].Loads[1]
	require.Equal(t, "fan-out", fan.Name)
	require.Equal(t, "open", fan.Mode())
	require.Equal(t, 100, fan.Width)
	require.Equal(t, 10_000, fan.MaxInFlight)
	require.Equal(t, "chains", chains.Name)
	require.Equal(t, "closed", chains.Mode())
	require.Equal(t, 10, chains.Generations)
}

func TestParsePlanRejects(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown field": {"tenants: [{id: a, loads: [{kind: timer, rate: 1, rat: 2}]}]", "field rat not found"},
		"no tenants":    {"duration: 1s", "tenants: 1 to 100"},
		"bad tenant id": {"tenants: [{id: A_B, loads: [{kind: timer, rate: 1}]}]", `"A_B" is not a tenant id`},
		"twice":         {"tenants: [{id: a, loads: [{kind: timer, rate: 1}]}, {id: a, loads: [{kind: timer, rate: 1}]}]", `"a" twice`},
		"kind":          {"tenants: [{id: a, loads: [{kind: nap, rate: 1}]}]", `"nap" is not one of`},
		"both modes":    {"tenants: [{id: a, loads: [{kind: timer, rate: 1, in_flight: 2}]}]", "exactly one of in_flight"},
		"neither mode":  {"tenants: [{id: a, loads: [{kind: timer}]}]", "exactly one of in_flight"},
		"huge rate":     {"tenants: [{id: a, loads: [{kind: timer, rate: 1e9}]}]", "rate: up to"},
		"wide":          {"tenants: [{id: a, loads: [{kind: fan-out, rate: 1, width: 5000}]}]", "width: 1..1000"},
		"negative":      {"tenants: [{id: a, loads: [{kind: fan-out, rate: 1, generations: -1}]}]", "generations: 1.."},
		"duration":      {"duration: soon\ntenants: [{id: a, loads: [{kind: timer, rate: 1}]}]", `invalid duration "soon"`},
		"same load":     {"tenants: [{id: a, loads: [{kind: timer, rate: 1}, {kind: timer, rate: 2}]}]", `name: "timer" twice`},
		"limits":        {"tenants: [{id: a, limits: {burst: -1}, loads: [{kind: timer, rate: 1}]}]", "limits: must not be negative"},
		"starts burst":  {"tenants: [{id: a, limits: {starts_burst: -1}, loads: [{kind: timer, rate: 1}]}]", "limits: must not be negative"},
		"on_off alone":  {"tenants: [{id: a, loads: [{kind: timer, rate: 1, on_off: true}]}]", "on_off loads need the plan's cycle"},
		"cycle alone":   {"cycle: 10s\ntenants: [{id: a, loads: [{kind: timer, rate: 1}]}]", "cycle: no load is on_off"},
		"short cycle":   {"cycle: 1s\ntenants: [{id: a, loads: [{kind: timer, rate: 1, on_off: true}]}]", "cycle: at least 2s"},
	} {
		_, err := ParsePlan([]byte(tc.doc))
		require.ErrorContains(t, err, tc.want, name)
	}
}

func TestWindowsAlternateFromOff(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at          time.Duration
		on, settled bool
		next        time.Duration
	}{
		{-time.Second, false, false, 10 * time.Second}, // before the run: its first window
		{0, false, false, 10 * time.Second},
		{999 * time.Millisecond, false, false, 10 * time.Second},
		{time.Second, false, true, 10 * time.Second},
		{10 * time.Second, true, false, 20 * time.Second},
		{15 * time.Second, true, true, 20 * time.Second},
		{20*time.Second + settle, false, true, 30 * time.Second},
		{39 * time.Second, true, true, 40 * time.Second},
	} {
		n, settled, next := window(10*time.Second, t0, t0.Add(tc.at))
		require.Equal(t, []any{tc.on, tc.settled, t0.Add(tc.next)}, []any{onWindow(n), settled, next}, "at %v", tc.at)
		require.Equal(t, max(tc.at, 0)/(10*time.Second), time.Duration(n), "at %v", tc.at)
	}
	p, err := ParsePlan([]byte("cycle: 4s\ntenants: [{id: a, loads: [{kind: timer, rate: 1, on_off: true}, {kind: fan-out, rate: 1}]}]"))
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, p.Tenants[0].Loads[0].cycle, "an on/off load knows its plan's cycle")
}

func TestLoadPlanFileNamesTheChoices(t *testing.T) {
	t.Parallel()
	_, err := LoadPlanFile("no-such-plan")
	require.ErrorContains(t, err, "standard")
}

func TestEveryKindHasADefinitionAndAnInput(t *testing.T) {
	t.Parallel()
	for _, k := range Kinds {
		require.Contains(t, definitions[k], "name: "+definitionName(k)+"\n", k)
		l := LoadPlan{Kind: k, Width: 3, Generations: 4, Timer: Duration(time.Second)}
		require.NotNil(t, l.input(1), k)
	}
	fan := LoadPlan{Kind: KindFanOut, Width: 3}
	require.Equal(t, map[string]any{"items": []int{0, 1, 2}}, fan.input(1))
}
