package crdb_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/store/crdb/datagen"
)

// BenchmarkManagement measures the management reads and purges of issue 4
// on a generated data set (pkg/store/crdb/datagen): one measured tenant, "bench",
// of ORCHARD_BENCH_INSTANCES instances (default 100,000) beside
// ORCHARD_BENCH_OTHER_TENANTS other tenants (default 2) of
// ORCHARD_BENCH_OTHER_INSTANCES instances each (default a fifth of the
// measured tenant). Every instance has 2 executions of 5 history events
// (10 events per instance); 70% completed, 10% failed, 5% cancelled, 15%
// running; 20 names in 4 prefixes; tags env (3 values) and customer (1,000
// values); one instance in a hundred belongs to a tree of a root and 10
// children; creation times spread over 30 days. The measured tenant also
// holds a running tree of a root and 10,000 children.
//
// The full size is 1,000,000 instances in the measured tenant and 10
// other tenants of 100,000 (2M instances, 20M events in all):
//
//	ORCHARD_BENCH_INSTANCES=1000000 ORCHARD_BENCH_OTHER_TENANTS=10 ORCHARD_BENCH_OTHER_INSTANCES=100000 \
//	  go test -run='^$' -bench=Management -benchtime=3s -timeout 60m ./pkg/store/crdb/
//
// ORCHARD_BENCH_LOADED_URL points the benchmark at a database already
// migrated and loaded with the same sizes (by an earlier generation), to
// measure again without generating; the purges consume its data.
//
// The default size runs in about two minutes:
//
//	go test -run='^$' -bench=Management -benchtime=3s ./pkg/store/crdb/
//
// Latencies are reported as p50-ms and p99-ms over the iterations; purges
// as events/s, history events deleted per second. The purges consume data,
// so they run last; each stops with an error rather than measure an empty
// tenant.
func BenchmarkManagement(b *testing.B) {
	f := newManagementFixture(b)
	ctx := b.Context()

	for _, c := range f.listCases() {
		b.Run("List/"+c.name, func(b *testing.B) {
			measureLatency(b, func(i int) error {
				res, err := f.s.ListInstances(ctx, &store.ListInstancesParams{TenantID: benchTenant, Filter: c.filter(i), Limit: 100})
				if err == nil && len(res.Instances) == 0 && c.name != "id_prefix_4" {
					err = fmt.Errorf("filter %+v matches nothing", c.filter(i))
				}
				return err
			})
		})
	}

	b.Run("CountByStatus", func(b *testing.B) {
		measureLatency(b, func(int) error {
			res, err := f.s.CountInstances(ctx, &store.CountInstancesParams{TenantID: benchTenant})
			if err == nil && res.Total < int64(f.instances) {
				err = fmt.Errorf("counted %d instances, want at least %d", res.Total, f.instances)
			}
			return err
		})
	})

	b.Run("Tree10000", func(b *testing.B) {
		measureLatency(b, func(int) error {
			tree, err := f.s.GetInstanceTree(ctx, &store.GetInstanceTreeParams{TenantID: benchTenant, InstanceID: f.bigTreeRoot})
			if err == nil && len(tree.IDs) != 10_001 {
				err = fmt.Errorf("tree of %d instances, want 10,001", len(tree.IDs))
			}
			return err
		})
	})

	b.Run("Children10000", func(b *testing.B) {
		measureLatency(b, func(int) error {
			ids, err := f.s.ListChildren(ctx, &store.ListChildrenParams{TenantID: benchTenant, InstanceID: f.bigTreeRoot})
			if err == nil && len(ids) != 10_000 {
				err = fmt.Errorf("%d children, want 10,000", len(ids))
			}
			return err
		})
	})

	// Prune the running instances (their first execution continued as new)
	// and delete the terminal ones: disjoint sets, so each purge sees full
	// instances.
	b.Run("PruneExecutionsBulk", func(b *testing.B) {
		measureThroughput(b, func() (int64, error) {
			res, err := f.s.PruneExecutionsBulk(ctx, &store.PruneExecutionsBulkParams{
				TenantID: benchTenant,
				Filter:   store.InstanceFilter{Statuses: []store.Status{store.StatusRunning}},
				Options:  store.PruneOptions{KeepLast: 1},
				Limit:    200,
			})
			if err != nil {
				return 0, err
			}
			return res.EventsDeleted, nil
		})
	})

	b.Run("DeleteInstanceBulk", func(b *testing.B) {
		measureThroughput(b, func() (int64, error) {
			res, err := f.s.DeleteInstanceBulk(ctx, &store.DeleteInstanceBulkParams{
				TenantID: benchTenant,
				Filter:   store.InstanceFilter{CompletedBefore: new(f.spec.Start.Add(f.spec.Spread))},
				Limit:    200,
			})
			if err != nil {
				return 0, err
			}
			return res.EventsDeleted, nil
		})
	})
}

const benchTenant = "bench"

type managementFixture struct {
	s           *crdb.Store
	pool        *pgxpool.Pool
	spec        datagen.Spec
	instances   int
	bigTreeRoot string
}

func envInt(b *testing.B, name string, def int) int {
	raw := os.Getenv(name)
	if raw == "" {
		return def
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a count", name, raw)
	}
	return n
}

var benchNames = func() []string {
	var names []string
	for _, domain := range []string{"orders", "billing", "shipping", "users"} {
		for _, verb := range []string{"create", "update", "cancel", "sync", "report"} {
			names = append(names, domain+"."+verb)
		}
	}
	return names
}()

func newManagementFixture(b *testing.B) *managementFixture {
	b.Helper()
	n := envInt(b, "ORCHARD_BENCH_INSTANCES", 100_000)
	if n < 10_000 {
		b.Fatalf("ORCHARD_BENCH_INSTANCES=%d: at least 10,000, so the purges have data to measure", n)
	}
	others := envInt(b, "ORCHARD_BENCH_OTHER_TENANTS", 2)
	otherSize := envInt(b, "ORCHARD_BENCH_OTHER_INSTANCES", n/5)

	url := os.Getenv("ORCHARD_BENCH_LOADED_URL")
	loaded := url != ""
	if !loaded {
		url = testdb.URL(b)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	ctx := b.Context()

	customers := make([]string, 1000)
	for i := range customers {
		customers[i] = fmt.Sprintf("c%04d", i)
	}
	spec := datagen.Spec{
		Tenants:               []string{benchTenant},
		InstancesPerTenant:    n,
		ExecutionsPerInstance: 2,
		EventsPerExecution:    5,
		Completed:             0.70, Failed: 0.10, Cancelled: 0.05,
		Names:           benchNames,
		Tags:            map[string][]string{"env": {"prod", "staging", "dev"}, "customer": customers},
		Trees:           n / 1100,
		ChildrenPerTree: 10,
		Start:           time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Spread:          30 * 24 * time.Hour,
		Seed:            1,
		ChunkSize:       20_000,
	}
	var total datagen.Result
	add := func(sp datagen.Spec) {
		if loaded {
			return
		}
		res, err := datagen.Generate(ctx, pool, sp)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("datagen %v: %v", sp.Tenants, res)
		total.Instances += res.Instances
		total.Executions += res.Executions
		total.Events += res.Events
		total.Locks += res.Locks
		total.Elapsed += res.Elapsed
	}
	add(spec)
	tree := spec
	tree.InstancesPerTenant, tree.Trees, tree.ChildrenPerTree = 10_001, 1, 10_000
	tree.Completed, tree.Failed, tree.Cancelled = 0, 0, 0
	tree.IDPrefix = "tree-"
	add(tree)
	if others > 0 && otherSize > 0 {
		other := spec
		other.Tenants = nil
		for i := range others {
			other.Tenants = append(other.Tenants, fmt.Sprintf("other-%02d", i+1))
		}
		other.InstancesPerTenant, other.Trees = otherSize, otherSize/1100
		add(other)
	}
	b.Logf("datagen total: %v", total)

	start := time.Now()
	if loaded {
		err = nil
	} else if testdb.SharedServer(b).Cockroach {
		err = datagen.Analyze(ctx, pool)
	} else {
		// What autovacuum would do after the load: statistics, and the
		// visibility map that index-only scans need.
		for _, t := range []string{"tenants", "instances", "executions", "history", "instance_leases", "instance_tags", "instance_counts"} {
			if _, err = pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
				break
			}
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("vacuum analyze: %s", time.Since(start).Round(time.Millisecond))

	return &managementFixture{
		s:           crdb.New(pool, crdb.Options{}),
		pool:        pool,
		spec:        spec,
		instances:   n,
		bigTreeRoot: datagen.InstanceAt(tree, benchTenant, 0).ID,
	}
}

type listCase struct {
	name   string
	filter func(i int) store.InstanceFilter
}

// listCases are the filters of a list page, each drawn from a few values
// so the iterations do not all read the same rows. Selectivity in the
// measured tenant is given for each.
func (f *managementFixture) listCases() []listCase {
	day := func(i int) (time.Time, time.Time) {
		from := f.spec.Start.Add(time.Duration(i%29) * 24 * time.Hour)
		return from, from.Add(24 * time.Hour)
	}
	statuses := []store.Status{store.StatusCompleted, store.StatusFailed, store.StatusCancelled, store.StatusRunning}
	prefixes := []string{"orders.", "billing.", "shipping.", "users."}
	trees := max(1, f.spec.Trees)
	return []listCase{
		// No filter: the baseline.
		{"none", func(int) store.InstanceFilter { return store.InstanceFilter{} }},
		// 5% to 70%.
		{"status", func(i int) store.InstanceFilter {
			return store.InstanceFilter{Statuses: []store.Status{statuses[i%len(statuses)]}}
		}},
		// 5% each.
		{"name", func(i int) store.InstanceFilter { return store.InstanceFilter{Name: benchNames[i%len(benchNames)]} }},
		// 25% each.
		{"name_prefix", func(i int) store.InstanceFilter {
			return store.InstanceFilter{NamePrefix: prefixes[i%len(prefixes)]}
		}},
		// Two hex digits of a random UUID: 1/256.
		{"id_prefix", func(i int) store.InstanceFilter {
			return store.InstanceFilter{IDPrefix: fmt.Sprintf("%02x", (i*37)%256)}
		}},
		// Four hex digits, what someone looking for one id types: 1/65,536.
		{"id_prefix_4", func(i int) store.InstanceFilter {
			return store.InstanceFilter{IDPrefix: fmt.Sprintf("%04x", (i*7919)%65536)}
		}},
		// One day of 30: 3.3%.
		{"created_range", func(i int) store.InstanceFilter {
			from, to := day(i)
			return store.InstanceFilter{CreatedAfter: &from, CreatedBefore: &to}
		}},
		// One day of 30: 2.8% (85% are completed).
		{"completed_range", func(i int) store.InstanceFilter {
			from, to := day(i)
			return store.InstanceFilter{CompletedAfter: &from, CompletedBefore: &to}
		}},
		// 33%.
		{"tags_env", func(i int) store.InstanceFilter {
			return store.InstanceFilter{Tags: map[string]string{"env": []string{"prod", "staging", "dev"}[i%3]}}
		}},
		// 0.1%.
		{"tags_customer", func(i int) store.InstanceFilter {
			return store.InstanceFilter{Tags: map[string]string{"customer": fmt.Sprintf("c%04d", (i*7)%1000)}}
		}},
		// 99%.
		{"roots_only", func(int) store.InstanceFilter { return store.InstanceFilter{RootsOnly: true} }},
		// The 10 children of a tree root.
		{"parent", func(i int) store.InstanceFilter {
			root := datagen.InstanceAt(f.spec, benchTenant, (i%trees)*(1+f.spec.ChildrenPerTree))
			return store.InstanceFilter{ParentInstanceID: root.ID}
		}},
		// The first page of the 10,000 children of the big tree.
		{"parent_10000", func(int) store.InstanceFilter {
			return store.InstanceFilter{ParentInstanceID: f.bigTreeRoot}
		}},
		// 0.25% to 17.5%.
		{"status+name_prefix", func(i int) store.InstanceFilter {
			return store.InstanceFilter{
				Statuses:   []store.Status{statuses[i%len(statuses)]},
				NamePrefix: prefixes[(i/len(statuses))%len(prefixes)],
			}
		}},
	}
}

// measureLatency runs op once per iteration and reports the median and
// 99th percentile of its latency.
func measureLatency(b *testing.B, op func(i int) error) {
	b.Helper()
	var lat []time.Duration
	i := 0
	for b.Loop() {
		start := time.Now()
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		i++
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// measureThroughput runs op, which returns the history events it deleted,
// once per iteration and reports events deleted per second.
func measureThroughput(b *testing.B, op func() (int64, error)) {
	b.Helper()
	var events int64
	var busy time.Duration
	for b.Loop() {
		start := time.Now()
		n, err := op()
		if err != nil {
			b.Fatal(err)
		}
		busy += time.Since(start)
		if n == 0 {
			b.Fatal("nothing left to delete: raise ORCHARD_BENCH_INSTANCES or lower -benchtime")
		}
		events += n
	}
	b.ReportMetric(float64(events)/busy.Seconds(), "events/s")
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
}
