// Command targets measures Orchard, through its API, against its
// performance goals, on this machine and in one sitting (`go run
// ./loadtest/targets`, `make targets`): the insert rate pgbench gets from a
// PostgreSQL server set up as `orchard dev`'s, then, each on a fresh
// `orchard dev`, the built-in plans burst (W, and W against pgbench),
// half-load at half the W it has just measured, one-in-flight, chains, and
// fairness (the quiet tenant's p99 with the noisy one on against off, in
// one run). It prints each run as it ends and a table
// of the means, each with the range of its runs, and the goal each is held
// to.
//
// With --compare, a second orchard binary runs each measure right after the
// first, round after round, so that a noisy host slows both alike and the
// table sets them side by side.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/orchardhq/orchard/internal/dbserver"
	"github.com/orchardhq/orchard/loadtest"
	"github.com/orchardhq/orchard/loadtest/procs"
)

// The measures, in the order they run: half-load's rate comes from burst.
var measures = []string{"pgbench", "burst", "half-load", "one-in-flight", "chains", "fairness"}

// The goals, through the API with everything on one machine.
const (
	goalWPerPgbench   = 0.06 // burst W against pgbench's insert rate
	goalHalfP50       = 5    // ms, at half of W
	goalHalfP99       = 25   // ms, at half of W
	goalOneP50        = 3    // ms, one orchestration in flight
	goalGenerations   = 1000 // continue-as-new generations/s across chains
	goalFairnessShift = 0.10 // the quiet tenant's p99 beside the noisy one, against alone
)

type config struct {
	binaries []string
	dir      string
	rounds   int
	duration time.Duration
	warmup   time.Duration
	halfRate float64
	run      map[string]bool
}

func main() {
	var cfg config
	var orchard, compare, skip string
	fs := flag.NewFlagSet("targets", flag.ExitOnError)
	fs.StringVar(&orchard, "orchard", "bin/orchard", "the orchard binary measured")
	fs.StringVar(&compare, "compare", "", "a second orchard binary, measured right after the first in each round (empty: none)")
	fs.StringVar(&cfg.dir, "dir", ".orchard/targets", "where the logs and reports go (emptied first)")
	fs.IntVar(&cfg.rounds, "rounds", 1, "rounds: each measure runs this many times for each binary, alternating")
	fs.DurationVar(&cfg.duration, "duration", 0, "measured duration of every run (0: each plan's own; pgbench 15s)")
	fs.DurationVar(&cfg.warmup, "warmup", 0, "warmup of every run (0: each plan's own)")
	fs.Float64Var(&cfg.halfRate, "half-rate", 0, "orchestrations/s of the half-load runs (0: half the mean burst W of --orchard measured before them)")
	fs.StringVar(&skip, "skip", "", "measures to leave out, comma-separated: "+strings.Join(measures, ", "))
	_ = fs.Parse(os.Args[1:])
	cfg.binaries = []string{orchard}
	if compare != "" {
		cfg.binaries = append(cfg.binaries, compare)
	}
	var err error
	if cfg.run, err = selected(skip); err != nil {
		fatal(err)
	}
	if cfg.rounds < 1 || cfg.rounds > 100 || cfg.duration < 0 || cfg.warmup < 0 {
		fatal(errors.New("--rounds must be from 1 to 100, --duration and --warmup not negative"))
	}
	if !(cfg.halfRate >= 0 && cfg.halfRate <= 1e6) {
		fatal(fmt.Errorf("--half-rate %v: 0 (half of the measured W) or a rate up to 1e6/s", cfg.halfRate))
	}
	if cfg.run["half-load"] && !cfg.run["burst"] && cfg.halfRate == 0 {
		fatal(errors.New("half-load runs at half of burst's W: keep burst, or give --half-rate"))
	}
	for _, b := range cfg.binaries {
		if _, err := os.Stat(b); err != nil {
			fatal(err)
		}
	}
	if err := run(procs.SignalContext(), cfg, os.Stdout); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "targets:", err)
	os.Exit(1)
}

// selected is the set of measures to run, all but those named in skip.
func selected(skip string) (map[string]bool, error) {
	run := map[string]bool{}
	for _, m := range measures {
		run[m] = true
	}
	for name := range strings.SplitSeq(skip, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(measures, name) {
			return nil, fmt.Errorf("--skip: %q is not a measure (%s)", name, strings.Join(measures, ", "))
		}
		run[name] = false
	}
	return run, nil
}

// figures are one binary's results of every run, by name (see the table).
type figures map[string][]float64

func run(ctx context.Context, cfg config, out io.Writer) error {
	if err := os.RemoveAll(cfg.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return err
	}
	res := make([]figures, len(cfg.binaries))
	for i := range res {
		res[i] = figures{}
	}
	var pgbench []float64
	for _, m := range measures {
		if !cfg.run[m] {
			continue
		}
		for round := range cfg.rounds {
			if m == "pgbench" {
				tps, err := runPgbench(ctx, cfg)
				if err != nil {
					return err
				}
				pgbench = append(pgbench, tps)
				fmt.Fprintf(out, "round %d  pgbench  %.0f inserts/s\n", round+1, tps)
				continue
			}
			for b, bin := range cfg.binaries {
				line, err := measure(ctx, cfg, m, bin, fmt.Sprintf("%s-r%d-b%d", m, round+1, b+1), res[0], res[b])
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "round %d  %s  %s  %s\n", round+1, bin, m, line)
			}
		}
	}
	fmt.Fprintln(out)
	if err := writeTable(out, cfg.binaries, pgbench, res); err != nil {
		return err
	}
	return writeJSON(filepath.Join(cfg.dir, "targets.json"), cfg.binaries, pgbench, res)
}

// measure runs one measure with one binary and adds its figures to f; base
// holds the first binary's, whose W sets the half-load rate.
func measure(ctx context.Context, cfg config, m, bin, name string, base, f figures) (string, error) {
	switch m {
	case "burst":
		rep, err := runPlan(ctx, cfg, bin, name, "burst")
		if err != nil {
			return "", err
		}
		f.add("burst", rep.Total.Throughput)
		f.addCPU("burst", rep)
		return fmt.Sprintf("%.1f orchestrations/s  %s", rep.Total.Throughput, cpuString(rep)), nil
	case "half-load":
		rate := cfg.halfRate
		if rate == 0 {
			rate = math.Round(mean(base["burst"]) / 2)
		}
		plan, err := halfLoadPlan(filepath.Join(cfg.dir, name+".yaml"), rate)
		if err != nil {
			return "", err
		}
		rep, err := runPlan(ctx, cfg, bin, name, plan)
		if err != nil {
			return "", err
		}
		f.add("half-rate", rate)
		f.add("half-p50", rep.Total.Latency.P50)
		f.add("half-p99", rep.Total.Latency.P99)
		f.addCPU("half", rep)
		return fmt.Sprintf("%.0f/s offered, %.1f/s done  p50 %.1f ms  p99 %.1f ms  %s", rate, rep.Total.Throughput,
			rep.Total.Latency.P50, rep.Total.Latency.P99, cpuString(rep)), nil
	case "one-in-flight":
		rep, err := runPlan(ctx, cfg, bin, name, "one-in-flight")
		if err != nil {
			return "", err
		}
		f.add("one-p50", rep.Total.Latency.P50)
		return fmt.Sprintf("p50 %.2f ms  p99 %.2f ms", rep.Total.Latency.P50, rep.Total.Latency.P99), nil
	case "chains":
		rep, err := runPlan(ctx, cfg, bin, name, "chains")
		if err != nil {
			return "", err
		}
		f.add("generations", rep.Total.Generations)
		return fmt.Sprintf("%.0f generations/s", rep.Total.Generations), nil
	case "fairness":
		plan, run := "fairness", cfg
		if cfg.duration > 0 {
			var err error
			if plan, run.duration, err = fairnessPlan(filepath.Join(cfg.dir, name+".yaml"), cfg.duration); err != nil {
				return "", err
			}
		}
		rep, err := runPlan(ctx, run, bin, name, plan)
		if err != nil {
			return "", err
		}
		ws, err := tenantWindows(rep, "lt-quiet")
		if err != nil {
			return "", err
		}
		f.add("quiet-alone", ws.Off.Latency.P99)
		f.add("quiet-beside", ws.On.Latency.P99)
		if ci := ws.P99ChangeCI; ci != nil {
			f.add("fairness-ci-low", ci[0]*100)
			f.add("fairness-ci-high", ci[1]*100)
		}
		onset := ""
		if o := ws.Onset; o != nil {
			f.add("quiet-onset", o.Latency.P99)
			onset = fmt.Sprintf("; %.1f ms in the first second of its turns (%d due)", o.Latency.P99, o.Completed)
		}
		return fmt.Sprintf("quiet tenant's p99 %.1f ms with the noisy one off (%d due), %.1f ms with it on (%d due): %s%s",
			ws.Off.Latency.P99, ws.Off.Completed, ws.On.Latency.P99, ws.On.Completed, ws.P99ChangeString(), onset), nil
	}
	return "", fmt.Errorf("unknown measure %q", m)
}

func (f figures) add(name string, v float64) { f[name] = append(f[name], v) }

func (f figures) addCPU(prefix string, rep *loadtest.Report) {
	if rep.CPU == nil {
		return
	}
	f.add(prefix+"-orchard-ms", rep.CPU.OrchardMillisPerOrchestration)
	f.add(prefix+"-database-ms", rep.CPU.DatabaseMillisPerOrchestration)
}

func cpuString(rep *loadtest.Report) string {
	if rep.CPU == nil {
		return ""
	}
	return fmt.Sprintf("CPU per orchestration: orchard %.2f ms, database %.2f ms, generator %.2f ms; steal %.2f cores",
		rep.CPU.OrchardMillisPerOrchestration, rep.CPU.DatabaseMillisPerOrchestration, rep.CPU.GeneratorMillisPerOrchestration,
		rep.CPU.StolenCores)
}

// tenantWindows is a tenant's latency in the on and off windows of a
// plan with a cycle.
func tenantWindows(rep *loadtest.Report, tenant string) (*loadtest.Windows, error) {
	for _, t := range rep.Tenants {
		if t.Tenant == tenant && t.Windows != nil {
			return t.Windows, nil
		}
	}
	return nil, fmt.Errorf("plan %s: no latency of tenant %s in both on and off windows in the report", rep.Plan, tenant)
}

// halfLoadPlan writes the built-in half-load plan with its rate set.
func halfLoadPlan(path string, rate float64) (string, error) {
	return path, writePlan(path, "half-load", func(p *loadtest.Plan) error {
		if len(p.Tenants) != 1 || len(p.Tenants[0].Loads) != 1 {
			return errors.New("the built-in half-load plan is not one tenant's one load")
		}
		p.Tenants[0].Loads[0].Rate = rate
		return nil
	})
}

// fairnessPlan writes the built-in fairness plan for a run of about d:
// its windows a quarter of the run, and the run at least two windows of
// each kind, so that both have latencies past their first second. It
// returns the plan's path and its duration.
func fairnessPlan(path string, d time.Duration) (string, time.Duration, error) {
	cycle := max(loadtest.MinCycle, d/4)
	d = max(d, 4*cycle)
	return path, d, writePlan(path, "fairness", func(p *loadtest.Plan) error {
		p.Cycle, p.Duration = loadtest.Duration(cycle), loadtest.Duration(d)
		return nil
	})
}

// writePlan writes a built-in plan, changed by edit, to path.
func writePlan(path, name string, edit func(*loadtest.Plan) error) error {
	p, err := loadtest.LoadPlanFile(name)
	if err != nil {
		return err
	}
	if err := edit(p); err != nil {
		return err
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// runPlan runs a plan with `orchard loadtest` against a fresh `orchard dev`
// of bin, and reads its report.
func runPlan(ctx context.Context, cfg config, bin, name, plan string) (*loadtest.Report, error) {
	dir := filepath.Join(cfg.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// The database runs as another user when we are root: dev's directory
	// must be one that user can reach.
	devDir, err := os.MkdirTemp("", "orchard-targets-dev-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(devDir)
	if err := os.Chmod(devDir, 0o755); err != nil {
		return nil, err
	}
	port, err := dbserver.FreePort()
	if err != nil {
		return nil, err
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	dev := procs.New("dev", filepath.Join(dir, "dev.log"), bin, "dev", "--fresh", "--dir", filepath.Join(devDir, "dev"),
		"--listen", listen, "--ops-addr", "", "--log-level", "warn")
	if err := dev.Start(); err != nil {
		return nil, err
	}
	defer dev.Kill(syscall.SIGINT, 10*time.Second)
	token := filepath.Join(devDir, "dev", "tokens", "admin")
	if err := waitReady(ctx, dev, listen, token, dir); err != nil {
		return nil, err
	}
	args := []string{"loadtest", "--addr", "http://" + listen, "--token-file", token, "--plan", plan,
		"--cpu-pid", strconv.Itoa(dev.Pid()), "--quiet", "--out", filepath.Join(dir, "report"), "-o", "json"}
	if cfg.duration > 0 {
		args = append(args, "--duration", cfg.duration.String())
	}
	if cfg.warmup > 0 {
		args = append(args, "--warmup", cfg.warmup.String())
	}
	lt := exec.CommandContext(ctx, bin, args...)
	if msg, err := lt.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return nil, errors.New("interrupted")
		}
		return nil, fmt.Errorf("orchard loadtest --plan %s: %w\n%s", plan, err, msg)
	}
	if exits, last := dev.Exits(); exits > 0 {
		return nil, fmt.Errorf("orchard dev exited during the run (%s); see %s", last, filepath.Join(dir, "dev.log"))
	}
	b, err := os.ReadFile(filepath.Join(dir, "report", "report.json"))
	if err != nil {
		return nil, err
	}
	var rep loadtest.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if rep.Total.Completed == 0 {
		return nil, fmt.Errorf("%s: no orchestration completed; see %s", name, dir)
	}
	return &rep, nil
}

// waitReady waits until dev has written its admin token and its API
// accepts connections, or dev exited.
func waitReady(ctx context.Context, dev *procs.Process, listen, token, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		if st, err := os.Stat(token); err == nil && st.Size() > 0 {
			if conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", listen); err == nil {
				return conn.Close()
			}
		}
		if exits, last := dev.Exits(); exits > 0 {
			return fmt.Errorf("orchard dev exited (%s); see %s", last, filepath.Join(dir, "dev.log"))
		}
		if !loadtest.Sleep(ctx, 50*time.Millisecond) {
			return fmt.Errorf("orchard dev was not ready within 90 s; see %s", filepath.Join(dir, "dev.log"))
		}
	}
}

// pgbenchClients and pgbenchThreads are pgbench's -c and -j: 8 clients
// inserting one row each per transaction, on 2 threads.
const (
	pgbenchClients = 8
	pgbenchThreads = 2
)

// runPgbench measures pgbench's insert rate on a fresh PostgreSQL server set
// up as `orchard dev`'s (durable), into a table of its own.
func runPgbench(ctx context.Context, cfg config) (float64, error) {
	bin, err := dbserver.PostgresTool("pgbench")
	if err != nil {
		return 0, err
	}
	srv, err := dbserver.StartPostgres(ctx, dbserver.PostgresOptions{Durable: true})
	if err != nil {
		return 0, err
	}
	defer srv.Stop()
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		return 0, err
	}
	// pgbench measures PostgreSQL only, never CockroachDB: the table is the
	// one the goal's figure was first taken on, a sequence key included.
	_, err = conn.Exec(ctx, "CREATE TABLE pgb (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)")
	_ = conn.Close(ctx)
	if err != nil {
		return 0, err
	}
	script := filepath.Join(cfg.dir, "pgbench-insert.sql")
	if err := os.WriteFile(script, []byte("INSERT INTO pgb (v) VALUES ('x');\n"), 0o644); err != nil {
		return 0, err
	}
	secs := 15
	if cfg.duration > 0 {
		secs = max(int(math.Ceil(cfg.duration.Seconds())), 1)
	}
	cmd := exec.CommandContext(ctx, bin, "-n", "-c", strconv.Itoa(pgbenchClients), "-j", strconv.Itoa(pgbenchThreads),
		"-T", strconv.Itoa(secs), "-f", script, srv.URL)
	msg, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w\n%s", err, msg)
	}
	return pgbenchTPS(string(msg))
}

var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)

// pgbenchTPS reads the transactions per second of pgbench's report.
func pgbenchTPS(report string) (float64, error) {
	m := tpsLine.FindStringSubmatch(report)
	if m == nil {
		return 0, fmt.Errorf("no tps in pgbench's report:\n%s", report)
	}
	return strconv.ParseFloat(m[1], 64)
}

func mean(vs []float64) float64 {
	var sum float64
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs))
}

// row is a line of the table: a figure of each binary, and its goal.
type row struct {
	label string
	// figure names the runs whose mean the row shows, with their least
	// and greatest; value computes a row from several figures instead.
	figure string
	value  func(f figures) (float64, bool)
	unit   string
	goal   string
	// met says whether a value reaches the goal (nil: no goal).
	met func(v float64) bool
}

// meanOf is the mean of a figure's runs.
func meanOf(name string) func(f figures) (float64, bool) {
	return func(f figures) (float64, bool) {
		if len(f[name]) == 0 {
			return 0, false
		}
		return mean(f[name]), true
	}
}

func rows(pgbench []float64) []row {
	pg := mean(pgbench)
	return []row{
		{label: "burst W, orchestrations/s", figure: "burst", unit: "%.0f"},
		{label: "W / pgbench inserts/s", value: func(f figures) (float64, bool) {
			w, ok := meanOf("burst")(f)
			return w / pg, ok && len(pgbench) > 0
		}, unit: "%.3f", goal: fmt.Sprintf(">= %.2f", goalWPerPgbench), met: func(v float64) bool { return v >= goalWPerPgbench }},
		{label: "burst CPU per orchestration: orchard, ms", figure: "burst-orchard-ms", unit: "%.2f"},
		{label: "burst CPU per orchestration: database, ms", figure: "burst-database-ms", unit: "%.2f"},
		{label: "half load, orchestrations/s offered", figure: "half-rate", unit: "%.0f"},
		{label: "half load p50, ms", figure: "half-p50", unit: "%.1f", goal: fmt.Sprintf("<= %d", goalHalfP50),
			met: func(v float64) bool { return v <= goalHalfP50 }},
		{label: "half load p99, ms", figure: "half-p99", unit: "%.1f", goal: fmt.Sprintf("<= %d", goalHalfP99),
			met: func(v float64) bool { return v <= goalHalfP99 }},
		{label: "half load CPU per orchestration: orchard, ms", figure: "half-orchard-ms", unit: "%.2f"},
		{label: "half load CPU per orchestration: database, ms", figure: "half-database-ms", unit: "%.2f"},
		{label: "one in flight p50, ms", figure: "one-p50", unit: "%.2f", goal: fmt.Sprintf("<= %d", goalOneP50),
			met: func(v float64) bool { return v <= goalOneP50 }},
		{label: "continue-as-new, generations/s", figure: "generations", unit: "%.0f", goal: fmt.Sprintf(">= %d", goalGenerations),
			met: func(v float64) bool { return v >= goalGenerations }},
		{label: "fairness: quiet p99 with the noisy tenant off, ms", figure: "quiet-alone", unit: "%.1f"},
		{label: "fairness: quiet p99 with the noisy tenant on, ms", figure: "quiet-beside", unit: "%.1f"},
		{label: "fairness: change of the quiet p99", value: func(f figures) (float64, bool) {
			a, okA := meanOf("quiet-alone")(f)
			b, okB := meanOf("quiet-beside")(f)
			return (b/a - 1) * 100, okA && okB && a > 0
		}, unit: "%+.0f%%", goal: fmt.Sprintf("<= +%.0f%%", goalFairnessShift*100), met: func(v float64) bool { return v <= goalFairnessShift*100 }},
		{label: "fairness: the change's 90% CI in a run, low end", figure: "fairness-ci-low", unit: "%+.0f%%"},
		{label: "fairness: the change's 90% CI in a run, high end", figure: "fairness-ci-high", unit: "%+.0f%%"},
		{label: "fairness: quiet p99 in the noisy tenant's first second on (left out of the change), ms", figure: "quiet-onset", unit: "%.1f"},
	}
}

// writeTable prints the means of every binary's figures beside the goals,
// each with the range of its runs.
func writeTable(out io.Writer, binaries []string, pgbench []float64, res []figures) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "figure")
	for _, b := range binaries {
		fmt.Fprintf(tw, "\t%s", b)
	}
	fmt.Fprint(tw, "\tgoal\n")
	if len(pgbench) > 0 {
		fmt.Fprintf(tw, "pgbench inserts/s (the machine)\t%.0f%s\t\n", mean(pgbench), strings.Repeat("\t", len(binaries)-1))
	}
	spread := false
	for _, r := range rows(pgbench) {
		var cells []string
		for _, f := range res {
			value := r.value
			if r.figure != "" {
				value = meanOf(r.figure)
			}
			v, ok := value(f)
			if !ok {
				cells = append(cells, "-")
				continue
			}
			cell := fmt.Sprintf(r.unit, v)
			if runs := f[r.figure]; len(runs) > 1 {
				cell += fmt.Sprintf(" ["+r.unit+", "+r.unit+"]", slices.Min(runs), slices.Max(runs))
				spread = true
			}
			cells = append(cells, cell+verdict(r, v))
		}
		if slices.IndexFunc(cells, func(c string) bool { return c != "-" }) < 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.label, strings.Join(cells, "\t"), r.goal)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if spread {
		// The ranges say what a difference of means is worth.
		_, err := fmt.Fprintln(out, "[least, greatest] of the rounds: the means are of these runs")
		return err
	}
	return nil
}

func verdict(r row, v float64) string {
	switch {
	case r.met == nil:
		return ""
	case r.met(v):
		return " (met)"
	default:
		return " (not met)"
	}
}

// writeJSON saves every run's figures, for a later look.
func writeJSON(path string, binaries []string, pgbench []float64, res []figures) error {
	type binary struct {
		Orchard string  `json:"orchard"`
		Runs    figures `json:"runs"`
	}
	doc := struct {
		Pgbench  []float64 `json:"pgbench_inserts_per_s"`
		Binaries []binary  `json:"binaries"`
	}{Pgbench: pgbench}
	for i, b := range binaries {
		doc.Binaries = append(doc.Binaries, binary{Orchard: b, Runs: res[i]})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
