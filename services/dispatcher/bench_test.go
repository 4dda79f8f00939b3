package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/internal/testworker"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/retention"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/store/crdb/datagen"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// benchShape is one configuration of dispatcher and worker loops.
type benchShape struct{ loops, batch, workers int }

var benchShapes = []benchShape{{2, 1, 4}, {4, 8, 8}, {8, 16, 8}, {16, 16, 16}}

// bestRate is the best completion rate of BenchmarkOrchestrations in this
// run, and its shape: the latency benchmark runs at half of it.
var bestRate struct {
	sync.Mutex
	rate  float64
	shape benchShape
}

// BenchmarkOrchestrations measures W, completions per second of a
// one-activity orchestration: b.N instances are created, then dispatcher
// loops and test worker loops in this process run them all to completion on
// the throwaway server. It reports W beside T, pgbench's single-row INSERT
// rate on the same server (x_pgbench_insert = W / T). Then, at half the best
// W, it starts instances at a steady pace and reports the start-to-completion
// latency (p50, p99; the store's times have millisecond resolution).
//
//	go test -run='^$' -bench=Orchestrations -benchtime=3000x ./services/dispatcher/
func BenchmarkOrchestrations(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(fmt.Sprintf("loops=%d/batch=%d/workers=%d", shape.loops, shape.batch, shape.workers), func(b *testing.B) {
			bs := newBenchSystem(b, shape)
			b.StopTimer()
			bs.startMany(b.N)
			b.StartTimer()
			start := time.Now()
			bs.run()
			bs.waitTurns(2 * int64(b.N))
			elapsed := time.Since(start)
			b.StopTimer()
			bs.stop()
			bs.requireCompleted(b.N)

			rate := float64(b.N) / elapsed.Seconds()
			b.ReportMetric(rate, "orchestrations/s")
			if tps := testdb.PgbenchInsertRate(b, bs.url); tps > 0 {
				b.ReportMetric(rate/tps, "x_pgbench_insert")
			}
			bestRate.Lock()
			if rate > bestRate.rate {
				bestRate.rate, bestRate.shape = rate, shape
			}
			bestRate.Unlock()
		})
	}

	b.Run("latency_at_half_load", func(b *testing.B) {
		bestRate.Lock()
		rate, shape := bestRate.rate/2, bestRate.shape
		bestRate.Unlock()
		if rate == 0 {
			b.Fatal("run with the throughput benchmarks first (-bench=Orchestrations)")
		}
		bs := newBenchSystem(b, shape)
		bs.run()
		b.ResetTimer()
		// A steady pace: one start per tick.
		pace := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer pace.Stop()
		for i := range b.N {
			<-pace.C
			bs.startOne(i)
		}
		bs.waitTurns(2 * int64(b.N))
		b.StopTimer()
		bs.stop()
		lat := bs.latencies()
		b.ReportMetric(rate, "offered/s")
		b.ReportMetric(percentile(lat, 0.50), "p50-ms")
		b.ReportMetric(percentile(lat, 0.99), "p99-ms")
	})
}

type benchSystem struct {
	b     *testing.B
	url   string
	pool  *pgxpool.Pool
	store *crdb.Store
	shape benchShape
	d     *dispatcher.Dispatcher
	w     *testworker.Worker
	start store.Message
	// warnings counts what the dispatcher logged at warning level or
	// above (failed fetches and acks, each followed by a backoff).
	warnings warnCounter
}

// warnCounter is the writer of a text log handler at warning level: it
// counts the records and keeps the first few.
type warnCounter struct {
	n     atomic.Int64
	mu    sync.Mutex
	first []string
}

func (w *warnCounter) Write(p []byte) (int, error) {
	if w.n.Add(1) <= 3 {
		w.mu.Lock()
		w.first = append(w.first, strings.TrimSpace(string(p)))
		w.mu.Unlock()
	}
	return len(p), nil
}

func newBenchSystem(b *testing.B, shape benchShape) *benchSystem {
	pool := testdb.Pool(b, int32(shape.loops+shape.workers+8))
	bs := &benchSystem{b: b, url: pool.Config().ConnString(), pool: pool, store: crdb.New(pool, crdb.Options{}), shape: shape}
	ctx := b.Context()
	if err := bs.store.CreateTenant(ctx, &store.CreateTenantParams{TenantID: tenant}); err != nil {
		b.Fatal(err)
	}
	def, err := engine.ParseDefinition([]byte(oneActivity))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := bs.store.RegisterDefinition(ctx, &store.RegisterDefinitionParams{TenantID: tenant, Name: "one", Version: "1", Document: def.Document()}); err != nil {
		b.Fatal(err)
	}
	kind, payload, err := engine.EncodeMessage(engine.StartMessage{Input: json.RawMessage(`1`)})
	if err != nil {
		b.Fatal(err)
	}
	bs.start = store.Message{Kind: kind, Payload: payload}
	return bs
}

func (bs *benchSystem) startOne(i int) {
	_, err := bs.store.StartOrchestration(bs.b.Context(), &store.StartOrchestrationParams{
		TenantID: tenant, InstanceID: fmt.Sprintf("b-%08d", i), Name: "one", Version: "1", Input: []byte(`1`), Start: bs.start,
	})
	if err != nil {
		bs.b.Fatal(err)
	}
}

// startMany creates n instances with a few concurrent starters.
func (bs *benchSystem) startMany(n int) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				bs.startOne(i)
			}
		})
	}
	wg.Wait()
}

func (bs *benchSystem) run() {
	logger := slog.New(slog.NewTextHandler(&bs.warnings, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := dispatcher.New(dispatcher.Config{Store: bs.store, Loops: bs.shape.loops, Batch: bs.shape.batch, Logger: logger})
	if err != nil {
		bs.b.Fatal(err)
	}
	if err := d.Start(bs.b.Context()); err != nil {
		bs.b.Fatal(err)
	}
	bs.d = d
	// Workers are tenant-scoped, as they are behind the API (the token
	// names the tenant).
	bs.w = testworker.Start(bs.b.Context(), testworker.Config{Store: bs.store, TenantID: tenant, TaskQueues: []string{"q"}, Loops: bs.shape.workers, Handler: echo})
}

func (bs *benchSystem) stop() {
	bs.w.Stop()
	_ = bs.d.Stop(context.Background())
}

// waitTurns waits until the dispatcher committed n turns (two per
// instance: the start and the activity's result).
func (bs *benchSystem) waitTurns(n int64) {
	deadline := time.Now().Add(10 * time.Minute)
	for bs.d.Stats().Turns < n {
		if time.Now().After(deadline) {
			bs.b.Fatalf("only %d of %d turns after 10 minutes", bs.d.Stats().Turns, n)
		}
		testwait.Tick()
	}
}

func (bs *benchSystem) requireCompleted(n int) {
	res, err := bs.store.CountInstances(bs.b.Context(), &store.CountInstancesParams{TenantID: tenant,
		Filter: store.InstanceFilter{Statuses: []store.Status{store.StatusCompleted}}})
	if err != nil {
		bs.b.Fatal(err)
	}
	if res.Total != int64(n) {
		bs.b.Fatalf("%d instances completed, want %d", res.Total, n)
	}
}

// latencies lists every instance's start-to-completion time in ms.
func (bs *benchSystem) latencies() []float64 {
	var out []float64
	p := &store.ListInstancesParams{TenantID: tenant, Limit: store.MaxListLimit}
	for {
		page, err := bs.store.ListInstances(bs.b.Context(), p)
		if err != nil {
			bs.b.Fatal(err)
		}
		for _, in := range page.Instances {
			out = append(out, float64(in.CompletedAt.Sub(in.CreatedAt))/float64(time.Millisecond))
		}
		if page.Next == nil {
			return out
		}
		p.After = page.Next
	}
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(int(p*float64(len(s))), len(s)-1)]
}

// BenchmarkOrchestrationsBesideJanitor measures what a janitor purging
// another tenant costs the orchestrations on the same database: W (as
// BenchmarkOrchestrations, one shape) and the latency at a fixed pace, with
// the janitor idle, purging flat out, and purging under its pacer
// (retention.Pacer, as the janitor runs it), side by side in one run. The
// purge is the retention job's code (pkg/retention) over a tenant of
// ORCHARD_BENCH_PURGE_INSTANCES expired instances (200,000 by default), ten
// history events each, loaded (and vacuumed) in every mode, idle too, so
// the modes differ only by the purge; it must outlast the measurement. Each
// mode runs on a database of its own; ORCHARD_BENCH_JANITOR_MODES orders
// them (idle,flat-out,paced by default; idle must be among them), so that
// an effect of the order can be told from one of the mode. Beside the
// rates, each mode reports the transactions its database rolled back
// (serialization failures retried, mostly) and the dispatcher's failed
// fetches and acks (each followed by a backoff).
//
//	go test -run='^$' -bench=BesideJanitor -benchtime=3000x -timeout 30m ./services/dispatcher/
func BenchmarkOrchestrationsBesideJanitor(b *testing.B) {
	shape := benchShape{8, 16, 8}
	purgeSize := 200_000
	if v, err := strconv.Atoi(os.Getenv("ORCHARD_BENCH_PURGE_INSTANCES")); err == nil && v > 0 {
		purgeSize = v
	}
	modes := []string{"idle", "flat-out", "paced"}
	if v := os.Getenv("ORCHARD_BENCH_JANITOR_MODES"); v != "" {
		modes = strings.Split(v, ",")
	}
	if !slices.Contains(modes, "idle") {
		b.Fatal("ORCHARD_BENCH_JANITOR_MODES must include idle: the latency runs are paced at half its W")
	}
	var idleRate float64
	for _, mode := range modes {
		b.Run("throughput/janitor="+mode, func(b *testing.B) {
			bs := newBenchSystem(b, shape)
			b.StopTimer()
			bs.startMany(b.N)
			stop := bs.purge(mode, purgeSize)
			rollbacks := bs.rollbacks()
			b.StartTimer()
			start := time.Now()
			bs.run()
			bs.waitTurns(2 * int64(b.N))
			elapsed := time.Since(start)
			b.StopTimer()
			purged, duty := stop()
			bs.stop()
			rate := float64(b.N) / elapsed.Seconds()
			if mode == "idle" {
				idleRate = rate
			}
			b.ReportMetric(rate, "orchestrations/s")
			b.ReportMetric(purged, "purged-events/s")
			b.ReportMetric(duty, "duty")
			bs.reportFailures(rollbacks)
		})
	}
	for _, mode := range modes {
		b.Run("latency/janitor="+mode, func(b *testing.B) {
			if idleRate == 0 {
				b.Fatal("run with the throughput benchmarks first")
			}
			bs := newBenchSystem(b, shape)
			stop := bs.purge(mode, purgeSize)
			rollbacks := bs.rollbacks()
			bs.run()
			b.ResetTimer()
			pace := time.NewTicker(time.Duration(float64(time.Second) / (idleRate / 2)))
			defer pace.Stop()
			for i := range b.N {
				<-pace.C
				bs.startOne(i)
			}
			bs.waitTurns(2 * int64(b.N))
			b.StopTimer()
			purged, duty := stop()
			bs.stop()
			lat := bs.latencies()
			b.ReportMetric(idleRate/2, "offered/s")
			b.ReportMetric(percentile(lat, 0.50), "p50-ms")
			b.ReportMetric(percentile(lat, 0.99), "p99-ms")
			b.ReportMetric(purged, "purged-events/s")
			b.ReportMetric(duty, "duty")
			bs.reportFailures(rollbacks)
		})
	}
}

// rollbacks reads how many transactions the benchmark's database has
// rolled back so far (the server's statistics lag by up to a second).
func (bs *benchSystem) rollbacks() int64 {
	var n int64
	err := bs.pool.QueryRow(bs.b.Context(),
		"SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n)
	if err != nil {
		bs.b.Fatal(err)
	}
	return n
}

// reportFailures reports the rollbacks since before (see rollbacks) and
// the dispatcher's warnings, and logs the first of these.
func (bs *benchSystem) reportFailures(before int64) {
	bs.b.ReportMetric(float64(bs.rollbacks()-before), "rollbacks")
	bs.b.ReportMetric(float64(bs.warnings.n.Load()), "dispatch-warnings")
	bs.warnings.mu.Lock()
	defer bs.warnings.mu.Unlock()
	for _, w := range bs.warnings.first {
		bs.b.Log(w)
	}
}

// purge loads n expired instances of another tenant into the benchmark's
// database, vacuums it so that no autovacuum of the load runs during the
// measurement, and, in modes other than idle, purges them with the
// janitor's code until the returned stop is called, which reports the
// purge rate (events/s) and the pacer's last duty (1 when not paced).
func (bs *benchSystem) purge(mode string, n int) (stop func() (eventsPerSecond, duty float64)) {
	ctx := bs.b.Context()
	pool, err := pgxpool.New(ctx, bs.url)
	if err != nil {
		bs.b.Fatal(err)
	}
	now := time.Now()
	if _, err := datagen.Generate(ctx, pool, datagen.Spec{
		Tenants: []string{"bulk"}, InstancesPerTenant: n, EventsPerExecution: 10, Completed: 1,
		Start: now.Add(-24 * time.Hour), Spread: time.Hour, Seed: 9,
	}); err != nil {
		bs.b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		bs.b.Fatal(err)
	}
	if mode == "idle" {
		pool.Close()
		return func() (float64, float64) { return 0, 0 }
	}
	var pacer *retention.Pacer
	if mode == "paced" {
		pacer = retention.NewPacer(1)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan retention.Result, 1)
	started := time.Now()
	go func() {
		res, _ := retention.Apply(pctx, crdb.New(pool, crdb.Options{}), "bulk",
			store.RetentionPolicy{Default: store.Retention{Completed: new(time.Duration(0))}}, retention.Options{Now: now, Pacer: pacer})
		done <- res
	}()
	return func() (float64, float64) {
		cancel()
		res := <-done
		elapsed := time.Since(started)
		pool.Close()
		if res.Complete {
			bs.b.Logf("the purge ended before the measurement: give ORCHARD_BENCH_PURGE_INSTANCES more than %d", n)
		}
		duty := 1.0
		if pacer != nil {
			duty = pacer.Duty()
		}
		return float64(res.Events()) / elapsed.Seconds(), duty
	}
}
