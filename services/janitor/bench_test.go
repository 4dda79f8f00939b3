package janitor_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/retention"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/store/crdb/datagen"
)

// BenchmarkPurge measures the janitor's purge rate: history events deleted
// per second by one retention application (the job's code, without River's
// scheduling) over a tenant of ORCHARD_BENCH_INSTANCES instances (100,000
// by default; the figure is at 1,000,000) of which half have
// expired, ten history events each. Each iteration purges the data afresh:
// on PostgreSQL a copy of the data made once, elsewhere data made again
// (untimed). It also reports the transactions the database rolled back
// during the purge (serialization failures retried).
//
//	ORCHARD_BENCH_INSTANCES=1000000 go test -run='^$' -bench=Purge -benchtime=2x -timeout 60m ./services/janitor/
func BenchmarkPurge(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("ORCHARD_BENCH_INSTANCES")); err == nil && v > 0 {
		n = v
	}
	var events, instances, rollbacks int64
	var elapsed, dbCPU, ownCPU time.Duration
	now := time.Now().UTC()
	data := purgeData(b, n, now)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		pool, ok := testdb.Clone(b, data, 16)
		switch {
		case ok:
		case i == 0:
			pool = data
		default:
			pool = purgeData(b, n, now)
		}
		// The janitor's own connections: closed after the purge, so that
		// their statistics reach pg_stat_database.
		jp, backendCPU := janitorPool(b, pool)
		before := rollbacksSoFar(b, pool)
		st := crdb.New(jp, crdb.Options{})
		policy := store.RetentionPolicy{Default: store.Retention{Completed: new(15 * 24 * time.Hour)}}
		// Under an audit record, as the janitor's job runs it: every batch
		// also inserts its tally.
		audit := &store.AuditRecord{TenantID: "bench", RecordID: fmt.Sprintf("bench-%d", i), Actor: store.ActorJanitor,
			Role: store.ActorJanitor, Action: store.AuditRetention}
		if err := st.StartAudit(b.Context(), audit); err != nil {
			b.Fatal(err)
		}
		ownBefore := processCPU(b)
		b.StartTimer()
		start := time.Now()
		res, err := retention.Apply(b.Context(), st, "bench", policy, retention.Options{Now: now, Audit: audit.RecordID})
		elapsed += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if !res.Complete {
			b.Fatal("the purge did not finish")
		}
		events += res.Events()
		instances += res.Deleted.InstancesDeleted
		b.StopTimer()
		dbCPU += backendCPU()
		ownCPU += processCPU(b) - ownBefore
		jp.Close()
		idle := pool.Stat().TotalConns()
		testwait.Until(b, 30*time.Second, "the janitor's backends exit", func() bool {
			var n int32
			err := pool.QueryRow(b.Context(), `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND backend_type = 'client backend'`).Scan(&n)
			return err == nil && n <= idle
		})
		rollbacks += rollbacksSoFar(b, pool) - before
		b.StartTimer()
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(instances)/elapsed.Seconds(), "instances/s")
	b.ReportMetric(float64(instances)/float64(b.N), "instances/op")
	b.ReportMetric(float64(rollbacks)/float64(b.N), "rollbacks/op")
	// CPU per thousand events, of the janitor's backends and of this
	// process: what the purge costs, whatever else the machine runs.
	b.ReportMetric(float64(dbCPU.Milliseconds())*1000/float64(events), "db-cpu-ms/kevent")
	b.ReportMetric(float64(ownCPU.Milliseconds())*1000/float64(events), "go-cpu-ms/kevent")
}

// purgeData makes BenchmarkPurge's data: n instances completed over the 30
// days before now, half of them more than 15 days before.
func purgeData(b *testing.B, n int, now time.Time) *pgxpool.Pool {
	pool := testdb.Pool(b, 16)
	if _, err := datagen.Generate(b.Context(), pool, datagen.Spec{
		Tenants: []string{"bench"}, InstancesPerTenant: n, EventsPerExecution: 10, Completed: 1,
		Start: now.Add(-30 * 24 * time.Hour), Spread: 30 * 24 * time.Hour, Seed: 1,
	}); err != nil {
		b.Fatal(err)
	}
	if err := datagen.Analyze(b.Context(), pool); err != nil {
		b.Fatal(err)
	}
	return pool
}

// janitorPool opens the janitor's connections to the database of pool,
// and reports the CPU time their backends have used so far (from /proc:
// the server must run on this machine, on Linux).
func janitorPool(b *testing.B, pool *pgxpool.Pool) (*pgxpool.Pool, func() time.Duration) {
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	var mu sync.Mutex
	var pids []int
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		mu.Lock()
		defer mu.Unlock()
		pids = append(pids, int(c.PgConn().PID()))
		return nil
	}
	jp, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(jp.Close)
	return jp, func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		var total time.Duration
		for _, pid := range pids {
			st, ok := readProcStat(pid)
			if !ok {
				b.Fatalf("no /proc/%d/stat: the janitor's backends must run on this machine", pid)
			}
			total += st.cpu
		}
		return total
	}
}

// processCPU is the CPU time this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type procTimes struct {
	cpu time.Duration
}

// readProcStat reads a process's CPU time from /proc/PID/stat, counted in
// clock ticks of 10 ms.
func readProcStat(pid int) (procTimes, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procTimes{}, false
	}
	// The command name, in parentheses, may hold spaces: fields start after it.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return procTimes{}, false
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(fields[i], 10, 64); return v }
	const tick = 10 * time.Millisecond
	return procTimes{cpu: time.Duration(n(11)+n(12)) * tick}, true
}

// rollbacksSoFar reads how many transactions the database has rolled back;
// a backend reports its own when it exits, if not before.
func rollbacksSoFar(b *testing.B, pool *pgxpool.Pool) int64 {
	var n int64
	err := pool.QueryRow(b.Context(),
		"SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
