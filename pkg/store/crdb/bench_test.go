package crdb_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
)

// Run with: make bench, or
//   go test -run='^$' -bench=. -benchtime=3s ./pkg/store/crdb/

// roundTrips counts what a pool sends: each plain query is one round trip
// (BEGIN and COMMIT included), each batch is one round trip for all its
// statements.
type roundTrips struct {
	trips, statements atomic.Int64
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if ctx.Value(inBatch{}) == nil {
		r.trips.Add(1)
		r.statements.Add(1)
	}
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.trips.Add(1)
	return context.WithValue(ctx, inBatch{}, true)
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	r.statements.Add(1)
}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

type inBatch struct{}

// benchPoolSize bounds the connections of the orchestration benchmark's pool
// (plus two): more callers than that share them, as the dispatchers of a
// process share a pool sized for the database: past the cores, more
// statements in flight only contend
// (docs/decisions/store-bench-pool-size.md).
const benchPoolSize = 4

func benchStore(b *testing.B, conns int32) (*crdb.Store, *roundTrips, string) {
	b.Helper()
	url := testdb.URL(b)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = conns
	trips := &roundTrips{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	s := crdb.New(pool, crdb.Options{})
	if err := s.CreateTenant(context.Background(), &store.CreateTenantParams{TenantID: "bench"}); err != nil {
		b.Fatal(err)
	}
	return s, trips, url
}

// runCallers has callers goroutines run op until b.N operations are done;
// op returns how many it did.
func runCallers(b *testing.B, callers int, op func(ctx context.Context) (int, error)) time.Duration {
	b.Helper()
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	ctx := b.Context()
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for done.Load() < int64(b.N) {
				n, err := op(ctx)
				if err != nil {
					errs <- err
					return
				}
				done.Add(int64(n))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return elapsed
}

// BenchmarkOrchestrationCycle measures fetch + ack of orchestration items,
// one instance at a time (batch=1) and in batches (one fetch leases up to 8
// or 16 instances, one ack commits their turns). A cycle is one instance's
// turn: it consumes its messages, appends one history event and sends
// itself the next message, so 2,048 instances always have work.
func BenchmarkOrchestrationCycle(b *testing.B) {
	for _, batch := range []int{1, 8, 16} {
		for _, callers := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("batch=%d/callers=%d", batch, callers), func(b *testing.B) {
				benchmarkOrchestrationCycle(b, batch, callers)
			})
		}
	}
}

func benchmarkOrchestrationCycle(b *testing.B, batch, callers int) {
	s, trips, url := benchStore(b, int32(min(callers, benchPoolSize))+2)
	ctx := b.Context()
	for i := range 2048 {
		_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{
			TenantID: "bench", InstanceID: fmt.Sprintf("i-%04d", i), Name: "bench",
			Start: store.Message{Kind: "start", Payload: []byte(`{}`)},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	analyze(b, url)
	trips.trips.Store(0)
	trips.statements.Store(0)
	var empty atomic.Int64
	b.ResetTimer()
	elapsed := runCallers(b, callers, func(ctx context.Context) (int, error) {
		items, err := s.FetchOrchestrationItems(ctx, &store.FetchOrchestrationItemsParams{
			FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: "bench", LeaseDuration: time.Minute},
			Max:                          batch,
		})
		if err != nil || len(items) == 0 {
			empty.Add(1)
			return 0, err
		}
		turns := make([]*store.AckOrchestrationItemParams, len(items))
		for i, item := range items {
			ids := make([]string, len(item.Messages))
			for j, m := range item.Messages {
				ids[j] = m.ID
			}
			turns[i] = &store.AckOrchestrationItemParams{
				Lease: item.Lease, ExecutionID: item.Instance.CurrentExecutionID, MessageIDs: ids,
				History: []store.HistoryEvent{{EventID: int64(len(item.History)) + 1, Kind: "turn", Payload: []byte(`{}`)}},
				Status:  store.StatusRunning,
				Messages: []store.OutgoingMessage{{InstanceID: item.Lease.InstanceID,
					Message: store.Message{Kind: "next", Payload: []byte(`{}`)}}},
			}
		}
		errs, err := s.AckOrchestrationItems(ctx, &store.AckOrchestrationItemsParams{Turns: turns})
		if err != nil {
			return 0, err
		}
		for _, e := range errs {
			if e != nil {
				return 0, e
			}
		}
		return len(items), nil
	})
	b.StopTimer()
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "cycles/s")
	b.ReportMetric(float64(trips.trips.Load())/float64(b.N), "roundtrips/cycle")
	b.ReportMetric(float64(trips.statements.Load())/float64(b.N), "stmts/cycle")
	b.ReportMetric(float64(empty.Load())/float64(b.N), "emptyfetch/cycle")
	if tps := testdb.PgbenchInsertRate(b, url); tps > 0 {
		b.ReportMetric(rate/tps, "x_pgbench_insert")
	}
}

// BenchmarkWorkItemCycle measures fetch + ack of activity tasks; each ack
// deletes the task and enqueues its result for the instance.
func BenchmarkWorkItemCycle(b *testing.B) {
	for _, callers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s, trips, url := benchStore(b, int32(callers)+2)
			ctx := b.Context()
			// Enough tasks for the whole run, scheduled by turns of 64 instances.
			const instances = 64
			perInstance := b.N/instances + 1
			for i := range instances {
				id := fmt.Sprintf("i-%04d", i)
				_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{
					TenantID: "bench", InstanceID: id, Name: "bench", Start: store.Message{Kind: "start"},
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			for range instances {
				item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "bench", LeaseDuration: time.Minute})
				if err != nil || item == nil {
					b.Fatal("no instance to schedule tasks on", err)
				}
				tasks := make([]store.ActivityTask, perInstance)
				for j := range tasks {
					tasks[j] = store.ActivityTask{ActivityID: int64(j + 1), Name: "work", TaskQueue: "q", Input: []byte(`{}`), Attempt: 1}
				}
				err = s.AckOrchestrationItem(ctx, &store.AckOrchestrationItemParams{
					Lease: item.Lease, ExecutionID: 1, MessageIDs: []string{item.Messages[0].ID},
					Status: store.StatusRunning, Activities: tasks,
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			analyze(b, url)
			trips.trips.Store(0)
			trips.statements.Store(0)
			b.ResetTimer()
			elapsed := runCallers(b, callers, func(ctx context.Context) (int, error) {
				w, err := s.FetchWorkItems(ctx, &store.FetchWorkItemsParams{TenantID: "bench", TaskQueue: "q", LeaseDuration: time.Minute, Max: 1})
				if err != nil {
					return 0, err
				}
				if len(w) == 0 {
					return 0, nil // the last tasks are leased by other callers
				}
				return 1, s.AckWorkItem(ctx, &store.AckWorkItemParams{Lease: w[0].Lease, Result: &store.Message{Kind: "done", Payload: []byte(`{}`)}})
			})
			b.StopTimer()
			rate := float64(b.N) / elapsed.Seconds()
			b.ReportMetric(rate, "cycles/s")
			b.ReportMetric(float64(trips.trips.Load())/float64(b.N), "roundtrips/cycle")
			b.ReportMetric(float64(trips.statements.Load())/float64(b.N), "stmts/cycle")
			if tps := testdb.PgbenchInsertRate(b, url); tps > 0 {
				b.ReportMetric(rate/tps, "x_pgbench_insert")
			}
		})
	}
}

// analyze gives the planner the statistics a database in steady state has
// (autovacuum keeps them; a table filled a moment ago has none).
func analyze(b *testing.B, url string) {
	b.Helper()
	conn, err := pgx.Connect(b.Context(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(b.Context())
	if _, err := conn.Exec(b.Context(), "ANALYZE"); err != nil {
		b.Fatal(err)
	}
}
