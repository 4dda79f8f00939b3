package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/orchardhq/orchard/internal/dbserver"
	"github.com/orchardhq/orchard/loadtest"
	"github.com/orchardhq/orchard/loadtest/procs"
	"github.com/orchardhq/orchard/pkg/sdk"
)

// Config is a campaign: what runs, what it is offered, which faults hit it.
type Config struct {
	// Orchard is the orchard binary: `orchard migrate`, `orchard api` and
	// `orchard dispatcher` run from it.
	Orchard string
	// Self is the campaign's own binary; `Self worker ...` runs a worker
	// (RunWorker).
	Self string
	// Dir receives the services' logs, the keys and report.json; it is
	// emptied first.
	Dir string
	// Plan is the load: its tenants and loads (event loads are refused),
	// its duration (the time faults are injected in; warmup is ignored),
	// and Workers.Count worker processes per tenant, each running
	// Workers.Concurrency activities at once.
	Plan *loadtest.Plan
	// Dispatchers is the number of dispatcher processes (default 2), each
	// with DispatcherLoops loops (default 2).
	Dispatchers, DispatcherLoops int
	// DispatcherLease is the dispatchers' instance lease (0: their default).
	DispatcherLease time.Duration
	// WorkerLease is the workers' activity task lease (default 5s): how
	// long a killed worker's tasks wait before another worker gets them.
	WorkerLease time.Duration
	// Faults are cycled through, one every Interval (default 5s) from
	// Settle (default 3s) after the load starts, while a fault can end
	// before the load does.
	Faults           []FaultKind
	Settle, Interval time.Duration
	// RestartDelay is how long a killed process stays dead (default 1s).
	RestartDelay time.Duration
	// CutDuration is how long a cut lasts (default 2s); LatencyDuration
	// how long Latency (default 100ms, ±25%, each way) is added (default 3s).
	CutDuration, LatencyDuration, Latency time.Duration
	// DrainTimeout bounds the wait, once the load stops, for every
	// instance to end (default 60s); those still running then are stuck.
	DrainTimeout time.Duration
	// Seed picks the faults' targets.
	Seed uint64
	// Progress receives a line per fault and phase (nil: none).
	Progress io.Writer
}

func (c *Config) defaults() error {
	c.Dispatchers = cmp.Or(c.Dispatchers, 2)
	c.DispatcherLoops = cmp.Or(c.DispatcherLoops, 2)
	c.WorkerLease = cmp.Or(c.WorkerLease, 5*time.Second)
	c.Settle = cmp.Or(c.Settle, 3*time.Second)
	c.Interval = cmp.Or(c.Interval, 5*time.Second)
	c.RestartDelay = cmp.Or(c.RestartDelay, time.Second)
	c.CutDuration = cmp.Or(c.CutDuration, 2*time.Second)
	c.LatencyDuration = cmp.Or(c.LatencyDuration, 3*time.Second)
	c.Latency = cmp.Or(c.Latency, 100*time.Millisecond)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, 60*time.Second)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Orchard == "" || c.Self == "" || c.Dir == "" || c.Plan == nil {
		return errors.New("chaos: Orchard, Self, Dir and Plan are required")
	}
	for _, t := range c.Plan.Tenants {
		for i := range t.Loads {
			if _, ok := expectationOf(&t.Loads[i], ""); !ok {
				return fmt.Errorf("chaos: tenant %s, load %s: the campaign cannot judge %s loads", t.ID, t.Loads[i].Name, t.Loads[i].Kind)
			}
		}
	}
	return nil
}

// The tokens' issuer and audience.
const (
	issuer   = "orchard-chaos"
	audience = "orchard"
)

// campaign is a running campaign.
type campaign struct {
	cfg         Config
	db          *database
	proxy       *dbProxy
	api         *procs.Process
	dispatchers []*procs.Process
	workers     []*procs.Process
	apiURL      string
	hc          *http.Client

	mu          sync.Mutex
	starts      []*start
	startErrors map[string]int
}

// start is one orchestration the campaign started (or tried to).
type start struct {
	tenant string
	client *sdk.Client
	load   *loadtest.LoadPlan
	id     string
	// at is when the first attempt was sent.
	at time.Time
	// acked: the API acknowledged the start (or said the id was taken,
	// by an earlier attempt whose answer was lost).
	acked bool
}

// Run runs a campaign and returns its report; the report's Failed says
// whether any instance was lost, duplicated, failed or stuck.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	c := &campaign{cfg: cfg, startErrors: map[string]int{}, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}}
	defer c.hc.CloseIdleConnections()
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	defer c.stopAll()
	admin, tokens, err := c.startServices(ctx)
	if err != nil {
		return nil, err
	}
	clients := map[string]*sdk.Client{}
	for i := range cfg.Plan.Tenants {
		tp := &cfg.Plan.Tenants[i]
		token, err := loadtest.PrepareTenant(ctx, loadtest.Config{API: c.apiURL, AdminToken: admin, ReadyTimeout: time.Minute}, c.hc, tp)
		if err != nil {
			return nil, err
		}
		tokens[tp.ID] = token
		clients[tp.ID] = sdk.NewClient(c.apiURL, sdk.WithToken(token), sdk.WithHTTPClient(c.hc))
		if err := c.startWorkers(tp.ID, token); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(c.Progress(), "chaos: %d dispatchers, %d workers, api %s; load for %v\n", len(c.dispatchers), len(c.workers), c.apiURL, time.Duration(cfg.Plan.Duration))

	// The load, and the faults while it runs.
	t0 := time.Now()
	end := t0.Add(time.Duration(cfg.Plan.Duration))
	loadCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var wg sync.WaitGroup
	for i := range cfg.Plan.Tenants {
		tp := &cfg.Plan.Tenants[i]
		for j := range tp.Loads {
			l := &tp.Loads[j]
			wg.Go(func() {
				loadtest.Drive(loadCtx, l, t0, end, func(seq int64, _ time.Time) {
					c.runOne(loadCtx, tp.ID, clients[tp.ID], l, seq)
				})
			})
		}
	}
	var faults []Fault
	wg.Go(func() { faults = c.injectFaults(loadCtx, t0) })
	supervise, stopSupervising := context.WithCancel(ctx)
	defer stopSupervising()
	go c.supervise(supervise)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// Every instance ends, or is stuck.
	fmt.Fprintf(c.Progress(), "chaos: load over (%d starts); waiting up to %v for the instances to end\n", len(c.starts), cfg.DrainTimeout)
	drainBegan := time.Now()
	c.drain(ctx, clients)
	drained := time.Since(drainBegan)
	stopSupervising()

	rep, err := c.judge(ctx, clients, faults)
	if err != nil {
		return nil, err
	}
	rep.Plan, rep.Seed, rep.StartedAt = cfg.Plan.Name, cfg.Seed, began.UTC()
	rep.LoadSeconds = Seconds(time.Duration(cfg.Plan.Duration).Seconds())
	rep.DrainSeconds = Seconds(drained.Seconds())
	rep.Dispatchers, rep.Workers = len(c.dispatchers), len(c.workers)
	for _, d := range c.db.downtimes {
		rep.DBDowntimes = append(rep.DBDowntimes, Seconds(d.Seconds()))
	}
	rep.UnexpectedExits = map[string]int{}
	for _, p := range c.all() {
		if n, last := p.Exits(); n > 0 {
			rep.UnexpectedExits[p.Name] = n
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s exited %d times on its own (last: %s); see logs/%s.log", p.Name, n, last, p.Name))
		}
	}
	rep.WallSeconds = Seconds(time.Since(began).Seconds())
	return rep, nil
}

// Progress is where progress lines go.
func (c *campaign) Progress() io.Writer { return c.cfg.Progress }

// startServices starts the database, the proxy, the API and the
// dispatchers; it returns a platform admin's token and an empty map of
// the tenants' tokens.
func (c *campaign) startServices(ctx context.Context) (admin string, tokens map[string]string, err error) {
	cfg := c.cfg
	// The database runs as another user when we are root: its directory
	// must be one that user can reach.
	dbDir, err := os.MkdirTemp("", "orchard-chaos-db-")
	if err != nil {
		return "", nil, err
	}
	if c.db, err = startDatabase(ctx, dbDir); err != nil {
		_ = os.RemoveAll(dbDir)
		return "", nil, fmt.Errorf("database: %w", err)
	}
	if c.proxy, err = startDBProxy(c.db.addr()); err != nil {
		return "", nil, err
	}
	viaProxy, err := url.Parse(c.db.url())
	if err != nil {
		return "", nil, err
	}
	viaProxy.Host = c.proxy.addr()

	logs := filepath.Join(cfg.Dir, "logs")
	migrate := exec.CommandContext(ctx, cfg.Orchard, "migrate", "--database-url", c.db.url())
	if out, err := migrate.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("orchard migrate: %w\n%s", err, out)
	}

	keys, err := procs.NewKeys(cfg.Dir, issuer, audience, "chaos")
	if err != nil {
		return "", nil, err
	}
	admin = keys.AdminToken

	port, err := dbserver.FreePort()
	if err != nil {
		return "", nil, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	c.apiURL = "http://" + listen
	// Page and task tokens are signed with the secret: a worker's task
	// outlives the API process that handed it out.
	c.api = procs.New("api", filepath.Join(logs, "api.log"), cfg.Orchard, "api", "--listen", listen, "--ops-addr", "",
		"--database-url", viaProxy.String(), "--jwt-public-key-file", keys.PublicFile, "--jwt-signing-key-file", keys.PrivateFile,
		"--jwt-issuer", issuer, "--jwt-audience", audience, "--secret", keys.Secret,
		"--log-level", "warn", "--drain-timeout", "2s")
	if err := c.api.Start(); err != nil {
		return "", nil, err
	}
	for i := range cfg.Dispatchers {
		args := []string{cfg.Orchard, "dispatcher", "--database-url", viaProxy.String(), "--ops-addr", "",
			"--loops", strconv.Itoa(cfg.DispatcherLoops), "--log-level", "warn", "--drain-timeout", "2s"}
		if cfg.DispatcherLease > 0 {
			args = append(args, "--lease", cfg.DispatcherLease.String())
		}
		name := fmt.Sprintf("dispatcher-%d", i+1)
		p := procs.New(name, filepath.Join(logs, name+".log"), args...)
		if err := p.Start(); err != nil {
			return "", nil, err
		}
		c.dispatchers = append(c.dispatchers, p)
	}
	return admin, map[string]string{}, nil
}

// startWorkers starts the tenant's worker processes.
func (c *campaign) startWorkers(tenant, token string) error {
	tokenFile := filepath.Join(c.cfg.Dir, "token-"+tenant)
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return err
	}
	for i := range c.cfg.Plan.Workers.Count {
		name := fmt.Sprintf("worker-%s-%d", tenant, i+1)
		p := procs.New(name, filepath.Join(c.cfg.Dir, "logs", name+".log"), c.cfg.Self, "worker",
			"--api", c.apiURL, "--token-file", tokenFile, "--identity", name,
			"--concurrency", strconv.Itoa(c.cfg.Plan.Workers.Concurrency), "--lease", c.cfg.WorkerLease.String())
		if err := p.Start(); err != nil {
			return err
		}
		c.workers = append(c.workers, p)
	}
	return nil
}

func (c *campaign) all() []*procs.Process {
	var out []*procs.Process
	if c.api != nil {
		out = append(out, c.api)
	}
	out = append(out, c.dispatchers...)
	return append(out, c.workers...)
}

// supervise starts again, as a supervisor would, a process that exited
// on its own (it is counted, and reported).
func (c *campaign) supervise(ctx context.Context) {
	for loadtest.Sleep(ctx, 250*time.Millisecond) {
		for _, p := range c.all() {
			if restarted, err := p.RestartIfExited(); restarted {
				fmt.Fprintf(c.Progress(), "chaos: %s exited on its own; started again (%v)\n", p.Name, err)
			}
		}
	}
}

// stopAll stops the processes (workers first), the proxy and the
// database, and removes the database's directory.
func (c *campaign) stopAll() {
	var wg sync.WaitGroup
	for _, p := range c.workers {
		wg.Go(func() { p.Kill(syscall.SIGTERM, 5*time.Second) })
	}
	wg.Wait()
	for _, p := range append([]*procs.Process{c.api}, c.dispatchers...) {
		if p != nil {
			wg.Go(func() { p.Kill(syscall.SIGTERM, 5*time.Second) })
		}
	}
	wg.Wait()
	if c.proxy != nil {
		c.proxy.stop()
	}
	if c.db != nil {
		c.db.stop()
		_ = os.RemoveAll(c.db.opts.Dir)
	}
}

// runOne starts the load's seq-th orchestration under an id of its own,
// trying again through faults until the API acknowledges it, then waits
// for it to end (which paces a closed loop). Both stop when the load ends.
func (c *campaign) runOne(ctx context.Context, tenant string, client *sdk.Client, l *loadtest.LoadPlan, seq int64) {
	s := &start{tenant: tenant, client: client, load: l, id: fmt.Sprintf("%s-%06d", l.Name, seq), at: time.Now()}
	c.mu.Lock()
	c.starts = append(c.starts, s)
	c.mu.Unlock()
	for ctx.Err() == nil {
		_, err := l.Start(ctx, client, seq, sdk.WithInstanceID(s.id))
		if err == nil || errors.Is(err, sdk.ErrAlreadyExists) {
			c.mu.Lock()
			s.acked = true
			c.mu.Unlock()
			break
		}
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		c.startErrors[loadtest.ErrorCode(err)]++
		c.mu.Unlock()
		loadtest.Sleep(ctx, 200*time.Millisecond)
	}
	for ctx.Err() == nil {
		if _, err := client.Wait(ctx, s.id); err == nil {
			return
		}
		loadtest.Sleep(ctx, 200*time.Millisecond)
	}
}

// injectFaults injects the scheduled faults, one after another, and
// returns them.
func (c *campaign) injectFaults(ctx context.Context, t0 time.Time) []Fault {
	cfg := c.cfg
	budget := max(cfg.RestartDelay, cfg.CutDuration, cfg.LatencyDuration) + 2*time.Second
	in := &injector{c: c, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))}
	var out []Fault
	for i, at := range schedule(cfg.Faults, cfg.Settle, cfg.Interval, budget, time.Duration(cfg.Plan.Duration)) {
		if !loadtest.Sleep(ctx, time.Until(t0.Add(at))) {
			break
		}
		f := in.inject(ctx, cfg.Faults[i%len(cfg.Faults)])
		msg := fmt.Sprintf("chaos: [%5.1fs] %s %s: over after %v", f.At.Sub(t0).Seconds(), f.Kind, f.Target, f.End.Sub(f.At).Round(time.Millisecond))
		if f.Error != "" {
			msg += " — error: " + f.Error
		}
		fmt.Fprintln(c.Progress(), msg)
		out = append(out, f)
	}
	return out
}

// drain waits until no instance runs, in any tenant, or DrainTimeout.
func (c *campaign) drain(ctx context.Context, clients map[string]*sdk.Client) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DrainTimeout)
	defer cancel()
	for {
		running := int64(0)
		var err error
		for _, cl := range clients {
			var n *sdk.Counts
			if n, err = cl.Count(ctx, sdk.Filter{Statuses: []sdk.Status{sdk.StatusRunning}}); err != nil {
				break
			}
			running += n.Total
		}
		if err == nil && running == 0 {
			return
		}
		if !loadtest.Sleep(ctx, 500*time.Millisecond) {
			return
		}
	}
}
