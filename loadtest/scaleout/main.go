// Command scaleout measures how Orchard's throughput grows with dispatcher
// processes (`go run ./loadtest/scaleout`). Each run starts, on this machine,
// a fresh PostgreSQL, `orchard api` with no dispatcher loops of its own and
// N `orchard dispatcher` processes (hints by LISTEN/NOTIFY, as they would be
// deployed on PostgreSQL), then drives them with `orchard loadtest` and
// reads its report. Runs alternate between the counts named in
// --dispatchers, round after round, so that a noisy host slows each alike.
//
// With --dispatcher-cpu each dispatcher process gets a cgroup of its own
// capped at that many cores: on a machine too small for the database, the
// API, the generator and several dispatchers at once, the cap makes the
// dispatchers the limit, which is what adding dispatchers is meant to lift.
// The report says how busy each part was, so that it shows where the limit
// moved instead.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/orchardhq/orchard/internal/dbserver"
	"github.com/orchardhq/orchard/loadtest"
	"github.com/orchardhq/orchard/loadtest/procs"
)

const (
	issuer   = "orchard-scaleout"
	audience = "orchard"
)

type config struct {
	orchard       string
	dir           string
	plan          string
	duration      time.Duration
	warmup        time.Duration
	dispatchers   []int
	rounds        int
	loops         int
	dispatcherCPU float64
	hints         string
}

func main() {
	var cfg config
	var counts string
	fs := flag.NewFlagSet("scaleout", flag.ExitOnError)
	fs.StringVar(&cfg.orchard, "orchard", "bin/orchard", "the orchard binary")
	fs.StringVar(&cfg.dir, "dir", ".orchard/scaleout", "where the logs, keys and reports go (emptied first)")
	fs.StringVar(&cfg.plan, "plan", "burst", "the load test plan: a built-in plan's name or a YAML file")
	fs.DurationVar(&cfg.duration, "duration", 15*time.Second, "measured duration of each run")
	fs.DurationVar(&cfg.warmup, "warmup", 0, "warmup of each run (0: the plan's)")
	fs.StringVar(&counts, "dispatchers", "1,2", "dispatcher processes of the runs of a round, comma-separated")
	fs.IntVar(&cfg.rounds, "rounds", 2, "rounds")
	fs.IntVar(&cfg.loops, "loops", 4, "loops per dispatcher process")
	fs.StringVar(&cfg.hints, "hints", "postgres", "how the processes pass hints: postgres (LISTEN/NOTIFY) or members (calls between them)")
	fs.Float64Var(&cfg.dispatcherCPU, "dispatcher-cpu", 0, "cores each dispatcher process may use, through a cgroup of its own (0: no cap)")
	_ = fs.Parse(os.Args[1:])
	for c := range strings.SplitSeq(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 || n > 16 {
			fatal(fmt.Errorf("--dispatchers: %q is not a count from 1 to 16", c))
		}
		cfg.dispatchers = append(cfg.dispatchers, n)
	}
	if cfg.hints != "postgres" && cfg.hints != "members" {
		fatal(fmt.Errorf("--hints: %q is neither postgres nor members", cfg.hints))
	}
	if cfg.rounds < 1 || cfg.loops < 1 || cfg.duration <= 0 || cfg.warmup < 0 {
		fatal(errors.New("--rounds, --loops and --duration must be positive, --warmup not negative"))
	}
	if c := cfg.dispatcherCPU; c != 0 && !(c >= minCap && c <= 1024) {
		fatal(fmt.Errorf("--dispatcher-cpu %v: 0 (no cap) or from %v to 1024 cores", c, minCap))
	}
	if err := run(procs.SignalContext(), cfg, os.Stdout); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "scaleout:", err)
	os.Exit(1)
}

// result is one run's figures.
type result struct {
	dispatchers int
	throughput  float64
	// Cores used over the measured window, from the load test's report
	// (API and dispatchers together, the database), and by each dispatcher
	// process over the whole load test, warmup included.
	orchardCores, databaseCores, generatorCores float64
	dispatcherCores                             []float64
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if err := os.RemoveAll(cfg.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return err
	}
	keys, err := procs.NewKeys(cfg.dir, issuer, audience, "scaleout")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "plan %s, %s a run, %d loops a dispatcher, dispatcher cap %s, hints %s\n", cfg.plan, cfg.duration, cfg.loops, capString(cfg.dispatcherCPU), cfg.hints)
	var results []result
	for round := range cfg.rounds {
		for _, n := range cfg.dispatchers {
			r, err := runOnce(ctx, cfg, keys, fmt.Sprintf("r%d-d%d", round+1, n), n)
			if err != nil {
				return err
			}
			results = append(results, r)
			fmt.Fprintf(out, "round %d  %d dispatcher(s)  %7.1f orchestrations/s  cores: orchard %.2f, database %.2f, generator %.2f; each dispatcher over the whole run %s\n",
				round+1, n, r.throughput, r.orchardCores, r.databaseCores, r.generatorCores, coresString(r.dispatcherCores))
		}
	}
	base := mean(results, cfg.dispatchers[0])
	for _, n := range cfg.dispatchers[1:] {
		fmt.Fprintf(out, "%d dispatchers against %d: %.2f× (mean %.1f against %.1f orchestrations/s)\n",
			n, cfg.dispatchers[0], mean(results, n)/base, mean(results, n), base)
	}
	return nil
}

func mean(rs []result, n int) float64 {
	var sum float64
	var k int
	for _, r := range rs {
		if r.dispatchers == n {
			sum += r.throughput
			k++
		}
	}
	return sum / float64(k)
}

func capString(cores float64) string {
	if cores == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2f cores", cores)
}

func coresString(cs []float64) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%.2f", c)
	}
	return strings.Join(parts, " ")
}

// runOnce measures one run of n dispatchers on a fresh database.
func runOnce(ctx context.Context, cfg config, keys procs.Keys, name string, n int) (res result, err error) {
	dir := filepath.Join(cfg.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	// The database runs as another user when we are root: its directory
	// must be one that user can reach.
	dbDir, err := os.MkdirTemp("", "orchard-scaleout-db-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dbDir)
	db, err := dbserver.StartPostgres(ctx, dbserver.PostgresOptions{Dir: dbDir})
	if err != nil {
		return result{}, err
	}
	defer db.Stop()
	dbPid, err := postmasterPid(filepath.Join(dbDir, "data"))
	if err != nil {
		return result{}, err
	}
	migrate := exec.CommandContext(ctx, cfg.orchard, "migrate", "--database-url", db.URL, "--log-level", "warn")
	if msg, err := migrate.CombinedOutput(); err != nil {
		return result{}, fmt.Errorf("orchard migrate: %w\n%s", err, msg)
	}
	port, err := dbserver.FreePort()
	if err != nil {
		return result{}, err
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	var started []*procs.Process
	var caps []*cpuCap
	defer func() {
		for _, p := range started {
			p.Kill(syscall.SIGTERM, 5*time.Second)
		}
		for _, c := range caps {
			if rerr := c.remove(); rerr != nil && err == nil {
				err = rerr
			}
		}
	}()
	start := func(p *procs.Process) error {
		started = append(started, p)
		return p.Start()
	}
	hints, err := hintArgs(cfg.hints, keys.Secret)
	if err != nil {
		return result{}, err
	}
	api := procs.New("api", filepath.Join(dir, "api.log"), append([]string{cfg.orchard, "api", "--database-url", db.URL,
		"--listen", listen, "--jwt-public-key-file", keys.PublicFile, "--jwt-signing-key-file", keys.PrivateFile,
		"--jwt-issuer", issuer, "--jwt-audience", audience, "--secret", keys.Secret, "--log-level", "warn",
		"--drain-timeout", "2s"}, hints...)...)
	if err := start(api); err != nil {
		return result{}, err
	}
	var dispatchers []int
	for i := range n {
		hints, err := hintArgs(cfg.hints, keys.Secret)
		if err != nil {
			return result{}, err
		}
		p := procs.New(fmt.Sprintf("dispatcher-%d", i+1), filepath.Join(dir, fmt.Sprintf("dispatcher-%d.log", i+1)),
			append([]string{cfg.orchard, "dispatcher", "--database-url", db.URL, "--loops", strconv.Itoa(cfg.loops),
				"--log-level", "warn", "--drain-timeout", "2s"}, hints...)...)
		if err := start(p); err != nil {
			return result{}, err
		}
		if cfg.dispatcherCPU > 0 {
			cg, err := newCPUCap(fmt.Sprintf("orchard-scaleout-%d-%s-%d", os.Getpid(), name, i+1), cfg.dispatcherCPU)
			if err != nil {
				return result{}, err
			}
			caps = append(caps, cg)
			if err := cg.add(p.Pid()); err != nil {
				return result{}, err
			}
		}
		dispatchers = append(dispatchers, p.Pid())
	}
	if err := waitListening(ctx, listen, api, dir); err != nil {
		return result{}, err
	}

	before, err := cpuTimes(dispatchers)
	if err != nil {
		return result{}, err
	}
	began := time.Now()
	args := []string{"loadtest", "--addr", "http://" + listen, "--token", keys.AdminToken, "--plan", cfg.plan,
		"--duration", cfg.duration.String(), "--quiet", "--out", filepath.Join(dir, "report"), "-o", "json"}
	if cfg.warmup > 0 {
		args = append(args, "--warmup", cfg.warmup.String())
	}
	for _, pid := range append([]int{api.Pid(), dbPid}, dispatchers...) {
		args = append(args, "--cpu-pid", strconv.Itoa(pid))
	}
	lt := exec.CommandContext(ctx, cfg.orchard, args...)
	if msg, err := lt.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return result{}, errors.New("interrupted")
		}
		return result{}, fmt.Errorf("orchard loadtest: %w\n%s", err, msg)
	}
	elapsed := time.Since(began)
	// A process that died during the run would leave the figures of fewer
	// processes than the run names.
	for _, p := range started {
		if exits, last := p.Exits(); exits > 0 {
			return result{}, fmt.Errorf("%s exited during the run (%s); see %s", p.Name, last, filepath.Join(dir, p.Name+".log"))
		}
	}
	after, err := cpuTimes(dispatchers)
	if err != nil {
		return result{}, err
	}
	res, err = readReport(filepath.Join(dir, "report", "report.json"))
	if err != nil {
		return result{}, err
	}
	res.dispatchers = n
	for i := range dispatchers {
		res.dispatcherCores = append(res.dispatcherCores, (after[i]-before[i]).Seconds()/elapsed.Seconds())
	}
	return res, nil
}

// hintArgs are a process's flags for hints: with members, an ops endpoint
// of its own, where the others reach it.
func hintArgs(mode, secret string) ([]string, error) {
	if mode == "postgres" {
		return []string{"--hints", "postgres", "--ops-addr", ""}, nil
	}
	port, err := dbserver.FreePort()
	if err != nil {
		return nil, err
	}
	return []string{"--hints", "members", "--hints-secret", secret, "--ops-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, nil
}

// waitListening waits until the API accepts connections, or exited.
func waitListening(ctx context.Context, addr string, api *procs.Process, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		if exits, last := api.Exits(); exits > 0 {
			return fmt.Errorf("the API exited (%s); see %s", last, filepath.Join(dir, "api.log"))
		}
		if !loadtest.Sleep(ctx, 50*time.Millisecond) {
			return fmt.Errorf("the API did not listen on %s: %w", addr, err)
		}
	}
}

// postmasterPid is the PostgreSQL server's process id: the first line of
// postmaster.pid in its data directory.
func postmasterPid(data string) (int, error) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// cpuTimes reads the CPU time each process has used so far.
func cpuTimes(pids []int) ([]time.Duration, error) {
	ts := make([]time.Duration, len(pids))
	for i, pid := range pids {
		t, err := loadtest.ProcessCPU(pid)
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	return ts, nil
}

func readReport(path string) (result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return result{}, err
	}
	var rep loadtest.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return result{}, fmt.Errorf("%s: %w", path, err)
	}
	if rep.CPU == nil {
		return result{}, fmt.Errorf("%s has no CPU report", path)
	}
	return result{throughput: rep.Total.Throughput, orchardCores: rep.CPU.OrchardCores, databaseCores: rep.CPU.DatabaseCores,
		generatorCores: rep.CPU.GeneratorCores}, nil
}

// cpuCap is a cgroup that caps the CPU of the processes in it.
type cpuCap struct{ dir string }

// cpuPeriod is the cgroups' CPU period (µs); the kernel takes quotas of
// 1 ms and more, so the least cap is minCap cores.
const (
	cpuPeriod = 100_000
	minCap    = 0.01
)

// newCPUCap makes a cgroup capped at cores CPUs: with cgroup v2's cpu.max
// where the cpu controller is enabled at the root, else with cgroup v1's
// cpu controller.
func newCPUCap(name string, cores float64) (*cpuCap, error) {
	quota := int(cores * cpuPeriod)
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && slices.Contains(strings.Fields(string(ctl)), "cpu") {
		return makeCPUCap(filepath.Join("/sys/fs/cgroup", name), "cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriod))
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		// The period is the kernel's default; only the quota is set.
		return makeCPUCap(filepath.Join("/sys/fs/cgroup/cpu", name), "cpu.cfs_quota_us", strconv.Itoa(quota))
	}
	return nil, errors.New("--dispatcher-cpu needs a writable cgroup cpu controller (v2 at /sys/fs/cgroup with cpu enabled, or v1 at /sys/fs/cgroup/cpu)")
}

func makeCPUCap(dir, file, value string) (*cpuCap, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("set %s: %w", file, err)
	}
	return &cpuCap{dir: dir}, nil
}

func (c *cpuCap) add(pid int) error {
	return os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// remove removes the cgroup; its processes have exited.
func (c *cpuCap) remove() error {
	if err := os.Remove(c.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup: %w", err)
	}
	return nil
}
