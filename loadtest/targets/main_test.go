package main

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orchardhq/orchard/loadtest"
)

func TestPgbenchTPS(t *testing.T) {
	report := `pgbench (15.13 (Debian 15.13-0+deb12u1))
transaction type: /tmp/pgbench-insert.sql
number of clients: 8
number of transactions actually processed: 314705
latency average = 0.381 ms
initial connection time = 10.263 ms
tps = 20981.682024 (without initial connection time)
`
	tps, err := pgbenchTPS(report)
	if err != nil || tps != 20981.682024 {
		t.Fatalf("pgbenchTPS = %v, %v; want 20981.682024", tps, err)
	}
	if _, err := pgbenchTPS("pgbench: error: connection to server failed\n"); err == nil {
		t.Fatal("a report with no tps line gave no error")
	}
}

func TestSelectedRefusesUnknownMeasures(t *testing.T) {
	run, err := selected(" fairness,chains ")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range measures {
		if want := m != "fairness" && m != "chains"; run[m] != want {
			t.Errorf("measure %s runs: %v, want %v", m, run[m], want)
		}
	}
	if _, err := selected("burst,fairnes"); err == nil || !strings.Contains(err.Error(), `"fairnes"`) {
		t.Fatalf("an unknown measure gave %v", err)
	}
}

// The half-load plan written keeps the built-in plan and takes the rate.
func TestHalfLoadPlanSetsTheRate(t *testing.T) {
	path, err := halfLoadPlan(filepath.Join(t.TempDir(), "half.yaml"), 477)
	if err != nil {
		t.Fatal(err)
	}
	got, err := loadtest.LoadPlanFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := loadtest.LoadPlanFile("half-load")
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Tenants[0].Loads[0].Rate; r != 477 {
		t.Fatalf("rate %v, want 477", r)
	}
	if got.Duration != want.Duration || got.Warmup != want.Warmup || got.Workers != want.Workers ||
		got.Tenants[0].ID != want.Tenants[0].ID || got.Tenants[0].Loads[0].Kind != want.Tenants[0].Loads[0].Kind {
		t.Fatalf("the plan written differs from the built-in one beyond its rate:\n%+v\n%+v", got, want)
	}
}

// A fairness run of a duration of its own keeps two windows of each kind.
func TestFairnessPlanFitsItsWindowsToTheDuration(t *testing.T) {
	for _, tc := range []struct{ asked, cycle, run time.Duration }{
		{2 * time.Second, 2 * time.Second, 8 * time.Second},
		{time.Minute, 15 * time.Second, time.Minute},
	} {
		path, run, err := fairnessPlan(filepath.Join(t.TempDir(), "fairness.yaml"), tc.asked)
		if err != nil {
			t.Fatal(err)
		}
		got, err := loadtest.LoadPlanFile(path)
		if err != nil {
			t.Fatal(err)
		}
		noisy := got.Tenants[1].Loads[0]
		if run != tc.run || time.Duration(got.Duration) != tc.run || time.Duration(got.Cycle) != tc.cycle || !noisy.OnOff {
			t.Errorf("asked %v: run %v, plan's duration %v, cycle %v, noisy load on/off %v; want %v, %v",
				tc.asked, run, time.Duration(got.Duration), time.Duration(got.Cycle), noisy.OnOff, tc.run, tc.cycle)
		}
	}
}

func TestTableJudgesTheGoals(t *testing.T) {
	fast := figures{"burst": {1300, 1100}, "half-p50": {4, 5}, "half-p99": {30, 40}, "one-p50": {2.5},
		"generations": {900}, "quiet-alone": {10, 12}, "quiet-beside": {11, 12}}
	slow := figures{"burst": {900}}
	var out strings.Builder
	if err := writeTable(&out, []string{"new", "old"}, []float64{20000}, []figures{fast, slow}); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	// Each line's cells, split where the table pads them.
	cells := map[string][]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(table), "\n") {
		fields := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		cells[fields[0]] = fields[1:]
	}
	for label, want := range map[string][]string{
		"pgbench inserts/s (the machine)": {"20000"},
		"burst W, orchestrations/s":       {"1200 [1100, 1300]", "900"},
		// 1200 / 20000 and 900 / 20000.
		"W / pgbench inserts/s":             {"0.060 (met)", "0.045 (not met)", ">= 0.06"},
		"half load p50, ms":                 {"4.5 [4.0, 5.0] (met)", "-", "<= 5"},
		"half load p99, ms":                 {"35.0 [30.0, 40.0] (not met)", "-", "<= 25"},
		"one in flight p50, ms":             {"2.50 (met)", "-", "<= 3"},
		"continue-as-new, generations/s":    {"900 (not met)", "-", ">= 1000"},
		"fairness: change of the quiet p99": {"+5% (met)", "-", "<= +10%"},
	} {
		if got := cells[label]; !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q; the table:\n%s", label, got, want, table)
		}
	}
	// A figure no binary has is left out.
	if strings.Contains(table, "CPU per orchestration") {
		t.Errorf("the table shows figures nobody measured:\n%s", table)
	}
}
