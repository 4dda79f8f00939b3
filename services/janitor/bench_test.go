package janitor_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
// expired, ten history events each. Each iteration loads the data afresh
// (untimed) and purges it. It also reports the transactions the database
// rolled back during the purge (serialization failures retried).
//
//	ORCHARD_BENCH_INSTANCES=1000000 go test -run='^$' -bench=Purge -benchtime=1x -timeout 60m ./services/janitor/
func BenchmarkPurge(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("ORCHARD_BENCH_INSTANCES")); err == nil && v > 0 {
		n = v
	}
	var events, instances, rollbacks int64
	var elapsed, dbCPU, ownCPU time.Duration
	for range b.N {
		b.StopTimer()
		pool := testdb.Pool(b, 16)
		now := time.Now().UTC()
		if _, err := datagen.Generate(b.Context(), pool, datagen.Spec{
			Tenants: []string{"bench"}, InstancesPerTenant: n, EventsPerExecution: 10, Completed: 1,
			Start: now.Add(-30 * 24 * time.Hour), Spread: 30 * 24 * time.Hour, Seed: 1,
		}); err != nil {
			b.Fatal(err)
		}
		if err := datagen.Analyze(b.Context(), pool); err != nil {
			b.Fatal(err)
		}
		// The janitor's own connections: closed after the purge, so that
		// their statistics reach pg_stat_database.
		janitorPool := testdb.PoolFor(b, pool, 16)
		before := rollbacksSoFar(b, pool)
		st := crdb.New(janitorPool, crdb.Options{})
		policy := store.RetentionPolicy{Default: store.Retention{Completed: new(15 * 24 * time.Hour)}}
		dbBefore, ownBefore := serverCPU(b, pool), processCPU(b)
		b.StartTimer()
		start := time.Now()
		res, err := retention.Apply(b.Context(), st, "bench", policy, retention.Options{Now: now})
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
		janitorPool.Close()
		idle := pool.Stat().TotalConns()
		testwait.Until(b, 30*time.Second, "the janitor's backends exit", func() bool {
			var n int32
			err := pool.QueryRow(b.Context(), `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND backend_type = 'client backend'`).Scan(&n)
			return err == nil && n <= idle
		})
		rollbacks += rollbacksSoFar(b, pool) - before
		dbCPU += serverCPU(b, pool) - dbBefore
		ownCPU += processCPU(b) - ownBefore
		b.StartTimer()
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(instances)/elapsed.Seconds(), "instances/s")
	b.ReportMetric(float64(instances)/float64(b.N), "instances/op")
	b.ReportMetric(float64(rollbacks)/float64(b.N), "rollbacks/op")
	// CPU per thousand events, of the database server (every backend,
	// autovacuum included) and of this process: what the purge costs,
	// whatever else the machine runs.
	b.ReportMetric(float64(dbCPU.Milliseconds())*1000/float64(events), "db-cpu-ms/kevent")
	b.ReportMetric(float64(ownCPU.Milliseconds())*1000/float64(events), "go-cpu-ms/kevent")
}

// serverCPU reads the CPU time the PostgreSQL server on this machine has
// used so far: its postmaster's, its exited backends' and its live ones'
// (from /proc, Linux).
func serverCPU(b *testing.B, pool *pgxpool.Pool) time.Duration {
	var pid int
	if err := pool.QueryRow(b.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		b.Fatal(err)
	}
	backend := procStat(b, pid)
	postmaster := procStat(b, backend.ppid)
	total := postmaster.cpu + postmaster.children
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(child); ok && st.ppid == backend.ppid {
			total += st.cpu
		}
	}
	return total
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
	ppid          int
	cpu, children time.Duration
}

func procStat(b *testing.B, pid int) procTimes {
	st, ok := readProcStat(pid)
	if !ok {
		b.Fatalf("no /proc/%d/stat: the server's CPU time needs it on this machine", pid)
	}
	return st
}

// readProcStat reads a process's parent and CPU times (its own, and its
// waited-for children's) from /proc/PID/stat, in clock ticks of 10 ms.
func readProcStat(pid int) (procTimes, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procTimes{}, false
	}
	// The command name, in parentheses, may hold spaces: fields start after it.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 15 {
		return procTimes{}, false
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(fields[i], 10, 64); return v }
	const tick = 10 * time.Millisecond
	return procTimes{
		ppid:     int(n(1)),
		cpu:      time.Duration(n(11)+n(12)) * tick,
		children: time.Duration(n(13)+n(14)) * tick,
	}, true
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
