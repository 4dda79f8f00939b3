package loadtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// Config says where to run a plan and what to do with the results.
type Config struct {
	// API is the base URL of the Orchard API ("http://127.0.0.1:8080").
	API string
	// AdminToken is a platform admin's token: with it the generator
	// creates the tenants, sets their limits and mints their tokens.
	// Without it every tenant of the plan needs token_env.
	AdminToken string
	Plan       *Plan
	// CPUPids are server processes whose CPU (with their descendants') is
	// read from /proc over the measured window; none: CPU is not reported.
	CPUPids []int
	// Progress receives a progress line every second (nil: none).
	Progress io.Writer
	// ReadyTimeout is how long to wait for the API to answer at first
	// (default 30s).
	ReadyTimeout time.Duration
	// Logger receives the SDK workers' logs (default: errors only, on stderr).
	Logger *slog.Logger
}

// tenantRun is a tenant's clients during a run.
type tenantRun struct {
	plan *TenantPlan
	// client starts and awaits the orchestrations: it never retries, so
	// that what the server refuses is counted, not hidden.
	client *sdk.Client
	// workers run the activities.
	workers []*sdk.Worker
}

// Run runs the plan and returns its report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	plan := cfg.Plan
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, 30*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	// One connection per call in flight: long polls hold theirs.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second}}
	defer hc.CloseIdleConnections()

	tenants, err := setUp(ctx, cfg, hc)
	if err != nil {
		return nil, err
	}
	workCtx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	var workersDone sync.WaitGroup
	for _, t := range tenants {
		for _, w := range t.workers {
			workersDone.Go(func() {
				if err := w.Run(workCtx); err != nil {
					cfg.Logger.Error("loadtest: worker stopped", slog.String("tenant", t.plan.ID), slog.Any("error", err))
				}
			})
		}
	}
	defer func() {
		stopWorkers()
		workersDone.Wait()
	}()

	t0 := time.Now()
	measureStart := t0.Add(time.Duration(plan.Warmup))
	end := measureStart.Add(time.Duration(plan.Duration))
	rec := NewRecorder(measureStart, end)
	rec.splitByWindow(t0, time.Duration(plan.Cycle))
	runCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()

	var inFlight atomic.Int64
	var loads sync.WaitGroup
	for _, t := range tenants {
		for i := range t.plan.Loads {
			l := &t.plan.Loads[i]
			loads.Go(func() {
				Drive(runCtx, l, t0, end, func(seq int64, due time.Time) {
					inFlight.Add(1)
					defer inFlight.Add(-1)
					err := l.runOne(runCtx, t.client, seq)
					now := time.Now()
					if cutOff(runCtx, err, now, end) {
						return
					}
					rec.Record(t.plan.ID, l.Name, now, now.Sub(due), err)
				})
			})
		}
	}

	var before cpuSample
	var cpuErr error
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	measuring := false
	for waiting := true; waiting; {
		select {
		case now := <-progress.C:
			if !measuring && !now.Before(measureStart) {
				measuring = true
				if len(cfg.CPUPids) > 0 {
					before, cpuErr = sampleCPU(cfg.CPUPids)
				}
			}
			done, p99, ended, failed := rec.Progress()
			if cfg.Progress != nil {
				phase := "warmup"
				if measuring {
					phase = "measure"
				}
				fmt.Fprintf(cfg.Progress, "[%3.0fs/%.0fs %s] %d completed/s, p99 %v, in flight %d, ended %d, failed %d\n",
					now.Sub(t0).Seconds(), end.Sub(t0).Seconds(), phase, done, p99.Round(100*time.Microsecond), inFlight.Load(), ended, failed)
			}
		case <-runCtx.Done():
			waiting = false
		}
	}
	stillRunning := inFlight.Load()
	var after cpuSample
	if len(cfg.CPUPids) > 0 && cpuErr == nil {
		after, cpuErr = sampleCPU(cfg.CPUPids)
	}
	loads.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	rep := buildReport(rec, plan, time.Duration(plan.Duration).Seconds())
	rep.API, rep.StartedAt = cfg.API, t0.UTC()
	if stillRunning > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d orchestrations were still running when the measurement ended; they are not in the latencies", stillRunning))
	}
	switch {
	case len(cfg.CPUPids) == 0:
	case cpuErr != nil || !measuring:
		rep.Notes = append(rep.Notes, fmt.Sprintf("server CPU not read: %v", cmp.Or(cpuErr, errors.New("the measurement did not start"))))
	default:
		rep.CPU = cpuReport(cfg.CPUPids, before, after, time.Duration(plan.Duration), rep.Total.Completed)
	}
	return rep, nil
}

// cutOff reports whether a run's call ended because the run did, not by a
// failure: the run's context ended, or the call met its deadline, which is
// the run's end. Connect sends a deadline in whole milliseconds, rounded
// down, so the server may end a call up to a millisecond before the client's
// clock reaches it.
func cutOff(runCtx context.Context, err error, now, end time.Time) bool {
	if runCtx.Err() != nil && !now.Before(end) {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) && !now.Before(end.Add(-time.Millisecond))
}

// Drive offers one load until end (or until ctx ends): closed-loop or
// open-loop (the i-th arrival due at t0 + i/rate), and an on/off load only
// in its on windows. It calls one for each orchestration, with its sequence
// number in the load (from 1) and when it was due, and returns once every
// call has returned.
func Drive(ctx context.Context, l *LoadPlan, t0, end time.Time, one func(seq int64, due time.Time)) {
	var seq atomic.Int64
	run := func(due time.Time) { one(seq.Add(1), due) }
	var wg sync.WaitGroup
	defer wg.Wait()
	// off is, for an on/off load in an off window at t, when the window ends.
	off := func(t time.Time) (time.Time, bool) {
		if !l.OnOff {
			return time.Time{}, false
		}
		n, _, next := window(l.cycle, t0, t)
		return next, !onWindow(n)
	}
	if l.InFlight > 0 {
		for range l.InFlight {
			wg.Go(func() {
				for ctx.Err() == nil {
					now := time.Now()
					if next, ok := off(now); ok {
						Sleep(ctx, next.Sub(now))
						continue
					}
					run(now)
				}
			})
		}
		return
	}
	// Open loop: the i-th arrival is due at t0 + i/rate, and its latency
	// counts from then, however late the generator starts it.
	slots := make(chan struct{}, l.MaxInFlight)
	interval := time.Duration(float64(time.Second) / l.Rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := int64(0); ; i++ {
		due := t0.Add(time.Duration(i) * interval)
		if !due.Before(end) {
			return
		}
		if next, ok := off(due); ok {
			// The next arrival is the first due in the next window.
			i = int64((next.Sub(t0)+interval-1)/interval) - 1
			continue
		}
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-slots }()
			run(due)
		})
	}
}

// setUp makes each tenant ready (PrepareTenant) and builds its workers.
func setUp(ctx context.Context, cfg Config, hc *http.Client) ([]*tenantRun, error) {
	var out []*tenantRun
	for i := range cfg.Plan.Tenants {
		tp := &cfg.Plan.Tenants[i]
		token, err := PrepareTenant(ctx, cfg, hc, tp)
		if err != nil {
			return nil, err
		}
		setup := sdk.NewClient(cfg.API, sdk.WithToken(token), sdk.WithHTTPClient(hc))
		t := &tenantRun{plan: tp, client: sdk.NewClient(cfg.API, sdk.WithToken(token), sdk.WithHTTPClient(hc), sdk.WithRetryPolicy(sdk.RetryPolicy{MaxAttempts: 1}))}
		for n := range cfg.Plan.Workers.Count {
			t.workers = append(t.workers, NewEchoWorker(setup, fmt.Sprintf("loadtest-%s-%d", tp.ID, n), cfg.Plan.Workers.Concurrency,
				sdk.WithLogger(cfg.Logger), sdk.WithStopTimeout(5*time.Second)))
		}
		out = append(out, t)
	}
	return out, nil
}

// PrepareTenant makes a plan's tenant ready through the API at cfg.API:
// created and its limits set (with cfg.AdminToken) unless it names a
// token_env, its token minted, the definitions its loads run registered. It
// returns the tenant's token (client, worker and tenant-admin roles). While
// the API does not answer yet it tries again, for cfg.ReadyTimeout.
func PrepareTenant(ctx context.Context, cfg Config, hc *http.Client, tp *TenantPlan) (string, error) {
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, 30*time.Second)
	var admin *sdk.AdminClient
	if cfg.AdminToken != "" {
		admin = sdk.NewAdminClient(cfg.API, sdk.WithToken(cfg.AdminToken), sdk.WithHTTPClient(hc))
	}
	token, err := tenantToken(ctx, cfg, admin, tp)
	if err != nil {
		return "", fmt.Errorf("tenant %s: %w", tp.ID, err)
	}
	if err := register(ctx, sdk.NewClient(cfg.API, sdk.WithToken(token), sdk.WithHTTPClient(hc)), tp); err != nil {
		return "", fmt.Errorf("tenant %s: %w", tp.ID, err)
	}
	return token, nil
}

// NewEchoWorker is a worker of the load test's task queue that runs its one
// activity (EchoActivity), concurrency at once, calling the API through c.
func NewEchoWorker(c *sdk.Client, identity string, concurrency int, opts ...sdk.WorkerOption) *sdk.Worker {
	opts = append([]sdk.WorkerOption{sdk.WithConcurrency(concurrency), sdk.WithIdentity(identity), sdk.WithPollWait(10 * time.Second)}, opts...)
	w := sdk.NewWorker(c, TaskQueue, opts...)
	sdk.Register(w, EchoActivity, func(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil })
	return w
}

// tenantToken returns a token of the tenant with the client, worker and
// tenant-admin roles: from its token_env, or minted after the tenant is
// created and its limits set.
func tenantToken(ctx context.Context, cfg Config, admin *sdk.AdminClient, tp *TenantPlan) (string, error) {
	if tp.TokenEnv != "" {
		tok := os.Getenv(tp.TokenEnv)
		if tok == "" {
			return "", fmt.Errorf("token_env %s is empty", tp.TokenEnv)
		}
		return tok, nil
	}
	if admin == nil {
		return "", errors.New("no admin token to create the tenant and mint its token, and no token_env")
	}
	var limits []sdk.TenantOption
	if l := tp.Limits; l != nil {
		limits = append(limits, sdk.WithLimits(l.sdk()))
	}
	deadline := time.Now().Add(cfg.ReadyTimeout)
	for {
		_, err := admin.CreateTenant(ctx, tp.ID, limits...)
		if errors.Is(err, sdk.ErrAlreadyExists) && tp.Limits != nil {
			_, err = admin.SetLimits(ctx, tp.ID, tp.Limits.sdk())
		} else if errors.Is(err, sdk.ErrAlreadyExists) {
			err = nil
		}
		if err == nil {
			break
		}
		// The API may still be starting.
		if !errors.Is(err, sdk.ErrUnavailable) || time.Now().After(deadline) {
			return "", err
		}
		if !Sleep(ctx, 200*time.Millisecond) {
			return "", ctx.Err()
		}
	}
	tok, err := admin.MintToken(ctx, tp.ID, []sdk.Role{sdk.RoleClient, sdk.RoleWorker, sdk.RoleTenantAdmin}, 24*time.Hour,
		sdk.WithSubject("loadtest"))
	if err != nil {
		return "", err
	}
	return tok.Token, nil
}

func (l *Limits) sdk() sdk.Limits {
	return sdk.Limits{RequestsPerSecond: l.RequestsPerSecond, Burst: l.Burst, StartsPerSecond: l.StartsPerSecond, StartsBurst: l.StartsBurst, MaxRunningInstances: l.MaxRunningInstances}
}

// register registers the definitions the tenant's loads run.
func register(ctx context.Context, c *sdk.Client, tp *TenantPlan) error {
	var kinds []Kind
	for _, l := range tp.Loads {
		kinds = append(kinds, l.Kind)
		if l.Kind == KindSubOrchestration {
			kinds = append(kinds, KindOneActivity)
		}
	}
	slices.Sort(kinds)
	for _, k := range slices.Compact(kinds) {
		if _, err := c.RegisterDefinition(ctx, []byte(definitions[k])); err != nil && !errors.Is(err, sdk.ErrAlreadyExists) {
			return fmt.Errorf("definition %s: %w", definitionName(k), err)
		}
	}
	return nil
}

// Sleep waits d, or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
