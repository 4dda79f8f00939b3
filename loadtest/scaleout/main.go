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
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/orchardhq/orchard/internal/dbserver"
	"github.com/orchardhq/orchard/loadtest"
	"github.com/orchardhq/orchard/pkg/tenancy"
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
	if cfg.rounds < 1 || cfg.loops < 1 || cfg.duration <= 0 || cfg.warmup < 0 || cfg.dispatcherCPU < 0 || math.IsNaN(cfg.dispatcherCPU) {
		fatal(errors.New("--rounds, --loops and --duration must be positive, --warmup and --dispatcher-cpu not negative"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
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
	// (API and dispatchers together, the database) and, per dispatcher
	// process, over the whole run.
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
	keys, err := writeKeys(cfg.dir)
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
			fmt.Fprintf(out, "round %d  %d dispatcher(s)  %7.1f orchestrations/s  cores: orchard %.2f (dispatchers %s), database %.2f, generator %.2f\n",
				round+1, n, r.throughput, r.orchardCores, coresString(r.dispatcherCores), r.databaseCores, r.generatorCores)
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

// keyFiles are the API's token keys and the platform admin token the load
// test creates its tenants with.
type keyFiles struct{ private, public, adminToken, secret string }

func writeKeys(dir string) (keyFiles, error) {
	privPEM, pubPEM, err := tenancy.GenerateKeyPairPEM()
	if err != nil {
		return keyFiles{}, err
	}
	key, err := tenancy.ParsePrivateKeyPEM(privPEM)
	if err != nil {
		return keyFiles{}, err
	}
	minter, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: key, Issuer: issuer, Audience: audience, MaxTTL: 24 * time.Hour})
	if err != nil {
		return keyFiles{}, err
	}
	token, err := minter.Mint(tenancy.Claims{Subject: "scaleout", Roles: []tenancy.Role{tenancy.RolePlatformAdmin}}, 24*time.Hour)
	if err != nil {
		return keyFiles{}, err
	}
	k := keyFiles{
		private: filepath.Join(dir, "signing-key.pem"), public: filepath.Join(dir, "public-key.pem"),
		adminToken: filepath.Join(dir, "admin-token"), secret: hex.EncodeToString(key.Seed()),
	}
	for path, data := range map[string][]byte{k.private: privPEM, k.public: pubPEM, k.adminToken: []byte(token)} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return keyFiles{}, err
		}
	}
	return k, nil
}

// runOnce measures one run of n dispatchers on a fresh database.
func runOnce(ctx context.Context, cfg config, keys keyFiles, name string, n int) (result, error) {
	dir := filepath.Join(cfg.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	data := filepath.Join(dir, "db", "data")
	db, err := dbserver.StartPostgres(ctx, dbserver.PostgresOptions{Dir: filepath.Join(dir, "db")})
	if err != nil {
		return result{}, err
	}
	// The cluster goes, its log stays.
	defer func() { _ = db.Stop(); _ = os.RemoveAll(data) }()
	dbPid, err := postmasterPid(data)
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
	var procs []*exec.Cmd
	var caps []*cpuCap
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			_ = p.Wait()
		}
		for _, c := range caps {
			c.remove()
		}
	}()
	hints, err := hintArgs(cfg.hints, keys.secret)
	if err != nil {
		return result{}, err
	}
	apiProc, err := start(dir, "api", append([]string{cfg.orchard, "api", "--database-url", db.URL, "--listen", listen,
		"--jwt-public-key-file", keys.public, "--jwt-signing-key-file", keys.private, "--jwt-issuer", issuer,
		"--jwt-audience", audience, "--secret", keys.secret, "--log-level", "warn"}, hints...)...)
	if err != nil {
		return result{}, err
	}
	procs = append(procs, apiProc)
	pids := []int{apiProc.Process.Pid, dbPid}
	var dispatchers []int
	for i := range n {
		hints, err := hintArgs(cfg.hints, keys.secret)
		if err != nil {
			return result{}, err
		}
		p, err := start(dir, fmt.Sprintf("dispatcher-%d", i+1), append([]string{cfg.orchard, "dispatcher", "--database-url", db.URL,
			"--loops", strconv.Itoa(cfg.loops), "--log-level", "warn"}, hints...)...)
		if err != nil {
			return result{}, err
		}
		procs = append(procs, p)
		if cfg.dispatcherCPU > 0 {
			cg, err := newCPUCap(fmt.Sprintf("orchard-scaleout-%d-%d", os.Getpid(), i+1), cfg.dispatcherCPU)
			if err != nil {
				return result{}, err
			}
			caps = append(caps, cg)
			if err := cg.add(p.Process.Pid); err != nil {
				return result{}, err
			}
		}
		dispatchers = append(dispatchers, p.Process.Pid)
	}
	pids = append(pids, dispatchers...)
	if err := waitListening(ctx, listen); err != nil {
		return result{}, err
	}

	before, err := cpuTimes(dispatchers)
	if err != nil {
		return result{}, err
	}
	began := time.Now()
	args := []string{"loadtest", "--addr", "http://" + listen, "--token-file", keys.adminToken, "--plan", cfg.plan,
		"--duration", cfg.duration.String(), "--quiet", "--out", filepath.Join(dir, "report"), "-o", "json"}
	if cfg.warmup > 0 {
		args = append(args, "--warmup", cfg.warmup.String())
	}
	for _, pid := range pids {
		args = append(args, "--cpu-pid", strconv.Itoa(pid))
	}
	lt := exec.CommandContext(ctx, cfg.orchard, args...)
	if msg, err := lt.CombinedOutput(); err != nil {
		return result{}, fmt.Errorf("orchard loadtest: %w\n%s", err, msg)
	}
	elapsed := time.Since(began)
	after, err := cpuTimes(dispatchers)
	if err != nil {
		return result{}, err
	}
	r, err := readReport(filepath.Join(dir, "report", "report.json"))
	if err != nil {
		return result{}, err
	}
	r.dispatchers = n
	for i := range dispatchers {
		r.dispatcherCores = append(r.dispatcherCores, (after[i]-before[i]).Seconds()/elapsed.Seconds())
	}
	return r, nil
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

// start starts one of the run's processes, its output in dir/name.log.
func start(dir, name string, args ...string) (*exec.Cmd, error) {
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return cmd, nil
}

func waitListening(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the API did not listen on %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
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

// newCPUCap makes a cgroup capped at cores CPUs: with cgroup v2's cpu.max
// where the cpu controller is enabled at the root, else with cgroup v1's
// cpu controller.
func newCPUCap(name string, cores float64) (*cpuCap, error) {
	const period = 100_000 // µs
	quota := int(cores * period)
	if quota < 1000 {
		return nil, fmt.Errorf("a cap of %.3f cores is below the kernel's least quota", cores)
	}
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && slices.Contains(strings.Fields(string(ctl)), "cpu") {
		c := &cpuCap{dir: filepath.Join("/sys/fs/cgroup", name)}
		return c, c.make(map[string]string{"cpu.max": fmt.Sprintf("%d %d", quota, period)})
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		c := &cpuCap{dir: filepath.Join("/sys/fs/cgroup/cpu", name)}
		return c, c.make(map[string]string{"cpu.cfs_period_us": strconv.Itoa(period), "cpu.cfs_quota_us": strconv.Itoa(quota)})
	}
	return nil, errors.New("--dispatcher-cpu needs a writable cgroup cpu controller (v2 at /sys/fs/cgroup with cpu enabled, or v1 at /sys/fs/cgroup/cpu)")
}

func (c *cpuCap) make(settings map[string]string) error {
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return fmt.Errorf("make cgroup: %w", err)
	}
	// The period before the quota: v1 refuses a quota above the old period's.
	for _, file := range []string{"cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.max"} {
		if v, ok := settings[file]; ok {
			if err := os.WriteFile(filepath.Join(c.dir, file), []byte(v), 0o644); err != nil {
				_ = os.Remove(c.dir)
				return fmt.Errorf("set %s: %w", file, err)
			}
		}
	}
	return nil
}

func (c *cpuCap) add(pid int) error {
	return os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// remove removes the cgroup; its processes have exited.
func (c *cpuCap) remove() { _ = os.Remove(c.dir) }
