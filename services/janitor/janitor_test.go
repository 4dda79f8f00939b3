package janitor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/retention"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/store/crdb/datagen"
	"github.com/orchardhq/orchard/services/janitor"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// retryNow retries a failed job at once, so a test that cuts a job short
// sees it resumed without waiting for River's backoff.
type retryNow struct{}

func (retryNow) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

type env struct {
	t     *testing.T
	pool  *pgxpool.Pool
	store *crdb.Store
	now   time.Time
}

func newEnv(t *testing.T) *env {
	pool := testdb.Pool(t, 16)
	_, err := janitor.Migrate(t.Context(), pool, "")
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &env{t: t, pool: pool, now: now, store: crdb.New(pool, crdb.Options{Clock: fixedClock(now), MaxRowsPerTransaction: 500})}
}

// Migrators started at once (two `orchard migrate`s) all succeed: River's
// own migrator takes no lock, and the one that loses a race to create a
// type or table runs again.
func TestConcurrentMigrations(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, 16)
	for round := range 3 {
		riverSchema := fmt.Sprintf("river_race_%d", round)
		errs := make(chan error, 4)
		for range cap(errs) {
			go func() {
				_, err := janitor.Migrate(t.Context(), pool, riverSchema)
				errs <- err
			}()
		}
		for range cap(errs) {
			require.NoError(t, <-errs, riverSchema)
		}
	}
}

// start runs a janitor until the test ends; cfg adjusts its config. It
// runs unpaced: the pacer would slow it down as much as the machine is
// loaded (pkg/retention tests the pacer).
func (e *env) start(cfg func(*janitor.Config)) *janitor.Janitor {
	c := janitor.Config{
		Store: e.store, RiverPool: e.pool, Interval: time.Hour, Clock: fixedClock(e.now), Unpaced: true,
		RetryPolicy: retryNow{}, PollInterval: 20 * time.Millisecond, OperationPoll: 20 * time.Millisecond,
	}
	if cfg != nil {
		cfg(&c)
	}
	j, err := janitor.New(c)
	require.NoError(e.t, err)
	require.NoError(e.t, j.Start(context.WithoutCancel(e.t.Context())))
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = j.Stop(ctx)
	})
	return j
}

func (e *env) setPolicy(tenant string, p store.RetentionPolicy) {
	_, err := e.store.UpdateTenant(e.t.Context(), &store.UpdateTenantParams{TenantID: tenant, Retention: &p})
	require.NoError(e.t, err)
}

func (e *env) generate(spec datagen.Spec) {
	spec.Start, spec.Spread = e.now.Add(-30*24*time.Hour), 30*24*time.Hour-time.Minute
	_, err := datagen.Generate(e.t.Context(), e.pool, spec)
	require.NoError(e.t, err)
}

// row is an instance as the test reads it back, to judge retention by
// brute force.
type row struct {
	id, parent, root, name string
	status                 store.Status
	completed              *int64
	retention              *store.Retention
	executions, events     int64
}

// instanceIDs is the ids of the tenant's instances, in order.
func (e *env) instanceIDs(tenant string) []string {
	e.t.Helper()
	rows, err := e.pool.Query(e.t.Context(), `SELECT instance_id FROM instances WHERE tenant_id = $1 ORDER BY instance_id`, tenant)
	require.NoError(e.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(e.t, err)
	return ids
}

func (e *env) rows(tenant string) map[string]row {
	rows, err := e.pool.Query(e.t.Context(), `SELECT instance_id, COALESCE(parent_instance_id, ''), root_instance_id, name, status,
		completed_at, retention, execution_count, event_count FROM instances WHERE tenant_id = $1`, tenant)
	require.NoError(e.t, err)
	out := map[string]row{}
	var r row
	var ret []byte
	_, err = pgx.ForEachRow(rows, []any{&r.id, &r.parent, &r.root, &r.name, &r.status, &r.completed, &ret, &r.executions, &r.events}, func() error {
		r.retention = nil
		if ret != nil {
			r.retention = new(store.Retention)
			require.NoError(e.t, json.Unmarshal(ret, r.retention))
		}
		out[r.id] = r
		return nil
	})
	require.NoError(e.t, err)
	return out
}

// expectedTrees judges every root by the policy, by brute force: the
// roots whose rule lets them go and whose whole tree is terminal.
func expectedTrees(rows map[string]row, p store.RetentionPolicy, now time.Time) map[string]bool {
	running := map[string]bool{}
	for _, r := range rows {
		if !r.status.Terminal() {
			running[r.root] = true
		}
	}
	out := map[string]bool{}
	for _, r := range rows {
		if r.parent != "" || running[r.id] || r.completed == nil {
			continue
		}
		keep, ok := p.For(r.name, r.retention).KeepFor(r.status)
		if ok && time.UnixMilli(*r.completed).Before(now.Add(-keep)) {
			out[r.id] = true
		}
	}
	return out
}

// completeRun is the run that finished a tenant's job (the clock is fixed:
// runs cannot be told apart by time).
func (e *env) completeRun(tenant string) *store.JanitorRun {
	runs, err := e.store.ListJanitorRuns(e.t.Context(), &store.ListJanitorRunsParams{TenantID: tenant, Limit: store.MaxListLimit})
	require.NoError(e.t, err)
	for _, r := range runs {
		if r.Complete {
			return &r
		}
	}
	return nil
}

func (e *env) lastRun(tenant string) *store.JanitorRun {
	runs, err := e.store.ListJanitorRuns(e.t.Context(), &store.ListJanitorRunsParams{TenantID: tenant, Limit: 1})
	require.NoError(e.t, err)
	if len(runs) == 0 || runs[0].FinishedAt.IsZero() {
		return nil
	}
	return &runs[0]
}

func (e *env) audit(tenant, action string) []store.AuditRecord {
	recs, err := e.store.ListAuditRecords(e.t.Context(), &store.ListAuditRecordsParams{TenantID: tenant, Action: action})
	require.NoError(e.t, err)
	return recs
}

// requireConsistent checks what a delete must never leave: a child
// without its root, an execution or event without its instance, counters
// that disagree with the rows.
func (e *env) requireConsistent(tenant string) {
	var orphans int64
	require.NoError(e.t, e.pool.QueryRow(e.t.Context(), `
SELECT (SELECT count(*) FROM instances c WHERE c.tenant_id = $1 AND c.parent_instance_id IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM instances p WHERE p.tenant_id = c.tenant_id AND p.instance_id = c.parent_instance_id))
	+ (SELECT count(*) FROM executions x WHERE x.tenant_id = $1
		AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.tenant_id = x.tenant_id AND i.instance_id = x.instance_id))
	+ (SELECT count(*) FROM history h WHERE h.tenant_id = $1
		AND NOT EXISTS (SELECT 1 FROM executions x WHERE x.tenant_id = h.tenant_id AND x.instance_id = h.instance_id AND x.execution_id = h.execution_id))
	+ (SELECT count(*) FROM instances i WHERE i.tenant_id = $1 AND i.execution_count <> (SELECT count(*) FROM executions x WHERE x.tenant_id = i.tenant_id AND x.instance_id = i.instance_id))
	+ (SELECT count(*) FROM instances i WHERE i.tenant_id = $1 AND i.event_count <> (SELECT count(*) FROM history h WHERE h.tenant_id = i.tenant_id AND h.instance_id = i.instance_id))`,
		tenant).Scan(&orphans))
	require.Zero(e.t, orphans, "orphans or counters out of step in tenant %s", tenant)
	var counted, stored int64
	require.NoError(e.t, e.pool.QueryRow(e.t.Context(), `SELECT (SELECT COALESCE(sum(n), 0) FROM instance_counts WHERE tenant_id = $1),
		(SELECT count(*) FROM instances WHERE tenant_id = $1)`, tenant).Scan(&counted, &stored))
	require.Equal(e.t, stored, counted, "status counters")
}

// TestRetentionAppliesEveryRule: defaults by status, rules by name that
// override them field by field, instances' own retention, chains pruned by
// keep_last and max_age; running trees and sub-orchestrations never go on
// their own; the preview says exactly what the run then deletes, and the
// run is recorded in janitor_runs and the audit log.
func TestRetentionAppliesEveryRule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.generate(datagen.Spec{
		Tenants: []string{"acme", "bystander"}, InstancesPerTenant: 1200, ExecutionsPerInstance: 3, EventsPerExecution: 2,
		Completed: 0.5, Failed: 0.2, Cancelled: 0.15, Names: []string{"order", "report", "poll"},
		Trees: 40, ChildrenPerTree: 3, Seed: 7,
	})
	// Some roots keep themselves for one day whatever the policy says; one
	// old finished tree has a child that still runs.
	_, err := e.pool.Exec(ctx, `UPDATE instances SET retention = '{"completed":86400000000000,"failed":86400000000000,"cancelled":86400000000000}'
		WHERE tenant_id = 'acme' AND parent_instance_id IS NULL AND instance_id LIKE '0%'`)
	require.NoError(t, err)
	var stuckRoot string
	require.NoError(t, e.pool.QueryRow(ctx, `UPDATE instances SET status = 'Running', completed_at = NULL
		WHERE tenant_id = 'acme' AND instance_id = (
			SELECT c.instance_id FROM instances c JOIN instances r ON r.tenant_id = c.tenant_id AND r.instance_id = c.root_instance_id
			WHERE c.tenant_id = 'acme' AND c.parent_instance_id IS NOT NULL AND r.status = 'Completed' AND r.retention IS NULL
			ORDER BY r.completed_at LIMIT 1)
		RETURNING root_instance_id`).Scan(&stuckRoot))
	require.NoError(t, e.store.RecountInstances(ctx, "acme"))

	day := 24 * time.Hour
	policy := store.RetentionPolicy{
		Default: store.Retention{Completed: new(10 * day), Failed: new(20 * day), Chain: store.ChainRetention{KeepLast: 2}},
		ByName: map[string]store.Retention{
			"report": {Completed: new(time.Duration(0)), Cancelled: new(5 * day)},
			"poll":   {Chain: store.ChainRetention{MaxAge: new(15 * day), KeepLast: 1}},
		},
	}
	e.setPolicy("acme", policy)
	before := e.rows("acme")
	want := expectedTrees(before, policy, e.now)
	require.NotEmpty(t, want)
	require.NotContains(t, want, stuckRoot, "a tree with a running member is kept")
	var wantInstances, wantExecutions, wantEvents int64
	for _, r := range before {
		if want[r.root] {
			wantInstances++
			wantExecutions += r.executions
			wantEvents += r.events
		}
	}

	preview, err := retention.PreviewPolicy(ctx, e.store, "acme", policy, retention.PreviewOptions{Options: retention.Options{Now: e.now, PageSize: 97}})
	require.NoError(t, err)
	require.False(t, preview.Truncated)
	require.Equal(t, wantInstances, preview.Instances)
	require.Equal(t, wantExecutions+preview.PrunedExecutions, preview.Executions)
	require.Equal(t, wantEvents+preview.PrunedEvents, preview.Events)
	require.Positive(t, preview.PrunedExecutions, "chains are pruned")
	var groupInstances int64
	for _, g := range preview.Groups {
		groupInstances += g.Instances
	}
	require.Equal(t, preview.Instances, groupInstances)

	bystander := e.rows("bystander")
	reader := sdkmetric.NewManualReader()
	metrics, err := janitor.NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	// One run does it all, however loaded the machine: the budget is not
	// what this test is about.
	e.start(func(c *janitor.Config) { c.PageSize = 97; c.Metrics = metrics; c.JobBudget = 10 * time.Minute })
	testwait.Until(t, time.Minute, "the retention job", func() bool {
		recs := e.audit("acme", store.AuditRetention)
		return len(recs) == 1 && !recs[0].FinishedAt.IsZero()
	})
	run := e.lastRun("acme")
	require.True(t, run.Complete, run.Error)
	require.Empty(t, run.Error)

	after := e.rows("acme")
	for id, r := range before {
		_, kept := after[id]
		require.Equal(t, !want[r.root], kept, "instance %s (root %s, %s %s)", id, r.root, r.name, r.status)
	}
	require.Contains(t, after, stuckRoot)
	require.Equal(t, preview.Instances, run.InstancesDeleted, "the run deletes what the preview said")
	require.Equal(t, preview.Executions, run.ExecutionsDeleted)
	require.Equal(t, preview.Events, run.EventsDeleted)

	// The metrics say the same.
	var collected metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &collected))
	deleted, durations, backlog := map[string]int64{}, uint64(0), map[string]int64{}
	for _, sm := range collected.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					kind, _ := dp.Attributes.Value("kind")
					deleted[kind.AsString()] += dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					durations += dp.Count
				}
			case metricdata.Gauge[int64]:
				for _, dp := range data.DataPoints {
					tenant, _ := dp.Attributes.Value("tenant")
					backlog[tenant.AsString()] = dp.Value
				}
			}
		}
	}
	require.Equal(t, map[string]int64{"instances": run.InstancesDeleted, "executions": run.ExecutionsDeleted, "events": run.EventsDeleted}, deleted)
	require.Positive(t, durations, "orchard.janitor.run.duration")
	require.Equal(t, map[string]int64{"acme": 0}, backlog, "a complete run leaves no backlog")

	// Chains: every surviving instance keeps what its rule says.
	for id, r := range after {
		rule := policy.For(r.name, r.retention).Chain
		var past, old int64
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE x.completed_at < $2)
			FROM executions x JOIN instances i USING (tenant_id, instance_id)
			WHERE x.tenant_id = 'acme' AND x.instance_id = $1 AND x.execution_id <> i.current_execution_id`, id,
			e.now.Add(-15*day).UnixMilli()).Scan(&past, &old))
		switch {
		case rule.MaxAge != nil: // poll: keep the current one, and past ones younger than 15 days
			require.Zero(t, old, "instance %s", id)
		case rule.KeepLast == 2:
			require.LessOrEqual(t, past, int64(1), "instance %s", id)
		}
	}
	e.requireConsistent("acme")
	require.Equal(t, bystander, e.rows("bystander"), "another tenant is untouched")

	recs := e.audit("acme", store.AuditRetention)
	require.Len(t, recs, 1)
	require.False(t, recs[0].FinishedAt.IsZero())
	require.Equal(t, store.ActorJanitor, recs[0].Actor)
	require.Equal(t, store.AuditResult{Instances: run.InstancesDeleted, Executions: run.ExecutionsDeleted, Events: run.EventsDeleted, Complete: true}, recs[0].Result)

	// A second run finds nothing left, and reads nothing it has to keep:
	// not the roots whose name's rule keeps them longer than another
	// rule, nor those with a retention of their own not yet expired. It
	// reads the one expired root whose child still runs, and only that.
	again, err := retention.PreviewPolicy(ctx, e.store, "acme", policy, retention.PreviewOptions{Options: retention.Options{Now: e.now}})
	require.NoError(t, err)
	require.Zero(t, again.Instances)
	require.Zero(t, again.Executions)
	var kept, keptOverrides int
	for _, r := range after {
		if r.parent == "" && r.status.Terminal() {
			kept++
			if r.retention != nil {
				keptOverrides++
			}
		}
	}
	require.Positive(t, keptOverrides, "roots with a retention of their own are kept")
	require.Greater(t, kept, keptOverrides, "roots that follow the policy are kept")
	counted := &countingStore{Store: e.store}
	res, err := retention.Apply(ctx, counted, "acme", policy, retention.Options{Now: e.now})
	require.NoError(t, err)
	require.Zero(t, res.Deleted.InstancesDeleted)
	require.Equal(t, 1, counted.candidates, "candidates read again, of %d terminal roots kept", kept)
}

// countingStore counts the expiry candidates a retention run reads.
type countingStore struct {
	retention.Store
	candidates int
}

func (c *countingStore) ListExpiryCandidates(ctx context.Context, p *store.ListExpiryCandidatesParams) ([]store.ExpiryCandidate, error) {
	page, err := c.Store.ListExpiryCandidates(ctx, p)
	c.candidates += len(page)
	return page, err
}

// TestLargeBacklogDoesNotDelayAnotherTenant: one worker, a tenant with
// 50,000 expired instances queued first, and a small tenant queued behind
// it: the big one snoozes at its budget, so the small one is done while
// the big one still has most of its work left, all within one job (one
// audit record across its snoozes).
func TestLargeBacklogDoesNotDelayAnotherTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.generate(datagen.Spec{Tenants: []string{"big"}, InstancesPerTenant: 50_000, EventsPerExecution: 1, Completed: 1, Seed: 1})
	e.generate(datagen.Spec{Tenants: []string{"small"}, InstancesPerTenant: 20, EventsPerExecution: 1, Completed: 1, Seed: 2})
	now := store.RetentionPolicy{Default: store.Retention{Completed: new(time.Duration(0))}}
	e.setPolicy("big", now)
	e.setPolicy("small", now)
	j := e.start(func(c *janitor.Config) { c.Workers, c.JobBudget, c.PageSize = 1, 200*time.Millisecond, 200 })
	q := j.Queue()
	_, _, err := q.TriggerRetention(t.Context(), "big")
	require.NoError(t, err)
	_, _, err = q.TriggerRetention(t.Context(), "small")
	require.NoError(t, err)

	testwait.Until(t, time.Minute, "the small tenant's run", func() bool { return e.completeRun("small") != nil })
	var bigLeft int64
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM instances WHERE tenant_id = 'big'`).Scan(&bigLeft))
	require.Positive(t, bigLeft, "the small tenant was served before the big one was done")
	runs, err := e.store.ListJanitorRuns(t.Context(), &store.ListJanitorRunsParams{TenantID: "big", Limit: store.MaxListLimit})
	require.NoError(t, err)
	require.NotEmpty(t, runs)
	var deleted int64
	for _, r := range runs {
		require.Empty(t, r.Error)
		deleted += r.InstancesDeleted
	}
	require.Equal(t, int64(50_000)-bigLeft, deleted, "the runs count what went")
	recs := e.audit("big", store.AuditRetention)
	require.Len(t, recs, 1, "one audit record per job, across its snoozes")
	require.True(t, recs[0].FinishedAt.IsZero(), "the big tenant's job is not done")
}

// TestJobCutShortResumes: the janitor is stopped in the middle of a job
// (its context cancelled between batches); nothing is left half deleted,
// the audit record says the job did not finish, and the next janitor
// finishes the same job and its record.
func TestJobCutShortResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.generate(datagen.Spec{Tenants: []string{"acme"}, InstancesPerTenant: 6000, EventsPerExecution: 2, Completed: 1,
		Trees: 500, ChildrenPerTree: 2, Seed: 3})
	e.setPolicy("acme", store.RetentionPolicy{Default: store.Retention{Completed: new(time.Duration(0))}})
	first := e.start(func(c *janitor.Config) { c.PageSize = 10 })
	testwait.Until(t, time.Minute, "the first batches", func() bool {
		recs := e.audit("acme", store.AuditRetention)
		return len(recs) == 1 && recs[0].Result.Instances > 0
	})
	stopCtx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, first.Stop(stopCtx))

	recs := e.audit("acme", store.AuditRetention)
	require.Len(t, recs, 1)
	require.True(t, recs[0].FinishedAt.IsZero(), "the record says the job did not finish")
	require.False(t, recs[0].Result.Complete)
	cut := recs[0].Result.Instances
	require.Less(t, cut, int64(6000), "stopped in the middle")
	var left int64
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM instances WHERE tenant_id = 'acme'`).Scan(&left))
	require.Equal(t, int64(6000)-cut, left, "the record counts exactly what went")
	e.requireConsistent("acme")

	e.start(nil)
	testwait.Until(t, time.Minute, "the resumed job", func() bool {
		recs := e.audit("acme", store.AuditRetention)
		return len(recs) == 1 && !recs[0].FinishedAt.IsZero()
	})
	recs = e.audit("acme", store.AuditRetention)
	require.Equal(t, int64(6000), recs[0].Result.Instances)
	require.True(t, recs[0].Result.Complete)
	e.requireConsistent("acme")
}

// TestGracefulDeleteCutShortResumes: a graceful delete stopped between
// roots resumes where it stopped. The operation's counts and its audit
// record count every root, and no root deleted before the stop is taken for
// one that was gone (skipped).
func TestGracefulDeleteCutShortResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const roots = 1000 // the most a graceful delete takes
	e.generate(datagen.Spec{Tenants: []string{"acme"}, InstancesPerTenant: roots, EventsPerExecution: 2, Completed: 1, Seed: 4})
	ids := e.instanceIDs("acme")
	require.Len(t, ids, roots)
	req, err := json.Marshal(janitor.GracefulDelete{InstanceIDs: ids, Actor: "me", Role: "client"})
	require.NoError(t, err)
	require.NoError(t, e.store.CreateOperation(ctx, &store.Operation{TenantID: "acme", OperationID: "op", Kind: store.OperationGracefulDelete,
		Request: req, Deadline: e.now.Add(time.Hour)}))

	first := e.start(nil)
	require.NoError(t, first.Queue().RunOperation(ctx, "acme", "op"))
	testwait.Until(t, time.Minute, "the first roots", func() bool {
		recs := e.audit("acme", store.AuditGracefulDelete)
		return len(recs) == 1 && recs[0].Result.Instances > 0
	})
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, first.Stop(stopCtx))

	recs := e.audit("acme", store.AuditGracefulDelete)
	require.Len(t, recs, 1)
	require.True(t, recs[0].FinishedAt.IsZero(), "the record says the operation did not finish")
	cut := recs[0].Result.Instances
	require.Less(t, cut, int64(roots), "stopped in the middle")
	var left int64
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE tenant_id = 'acme'`).Scan(&left))
	require.Equal(t, int64(roots)-cut, left, "the record counts exactly what went")
	op, err := e.store.GetOperation(ctx, &store.GetOperationParams{TenantID: "acme", OperationID: "op"})
	require.NoError(t, err)
	require.Equal(t, store.OperationRunning, op.State)
	var progress janitor.GracefulDeleteResult
	require.NoError(t, json.Unmarshal(op.Result, &progress))
	require.Equal(t, int(cut), progress.Done, "the operation keeps how far it went")
	require.Empty(t, progress.Skipped)

	e.start(nil)
	testwait.Until(t, time.Minute, "the resumed operation", func() bool {
		op, err = e.store.GetOperation(ctx, &store.GetOperationParams{TenantID: "acme", OperationID: "op"})
		require.NoError(t, err)
		return op.State != store.OperationRunning
	})
	require.Equal(t, store.OperationSucceeded, op.State, op.Error)
	var res janitor.GracefulDeleteResult
	require.NoError(t, json.Unmarshal(op.Result, &res))
	require.Equal(t, int64(roots), res.InstancesDeleted)
	require.Equal(t, int64(roots), res.ExecutionsDeleted)
	require.Equal(t, roots, res.Done)
	require.Empty(t, res.Skipped, "a root deleted before the stop is not skipped")
	recs = e.audit("acme", store.AuditGracefulDelete)
	require.Len(t, recs, 1)
	require.False(t, recs[0].FinishedAt.IsZero())
	require.True(t, recs[0].Result.Complete)
	require.Equal(t, int64(roots), recs[0].Result.Instances)
	require.Equal(t, res.EventsDeleted, recs[0].Result.Events)
	e.requireConsistent("acme")
}

// TestGracefulDeleteRefusedFails: an operation the store refuses fails at
// once, in its first attempt, with the store's reason, instead of being
// retried by River with the same answer until it gives up; and when the
// refusal comes after some roots went, the audit record ends with the
// error and counts what went.
func TestGracefulDeleteRefusedFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.generate(datagen.Spec{Tenants: []string{"acme"}, InstancesPerTenant: 4, Trees: 1, ChildrenPerTree: 1, EventsPerExecution: 2, Completed: 1, Seed: 5})
	var root, child string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT instance_id FROM instances WHERE tenant_id = 'acme' AND parent_instance_id IS NULL
		AND instance_id NOT IN (SELECT root_instance_id FROM instances WHERE parent_instance_id IS NOT NULL) LIMIT 1`).Scan(&root))
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT instance_id FROM instances WHERE tenant_id = 'acme' AND parent_instance_id IS NOT NULL`).Scan(&child))
	tooMany := make([]string, store.MaxFilterIDs+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("missing-%d", i)
	}
	for id, ids := range map[string][]string{"too-many": tooMany, "child": {root, child}} {
		req, err := json.Marshal(janitor.GracefulDelete{InstanceIDs: ids, Actor: "me", Role: "client"})
		require.NoError(t, err)
		require.NoError(t, e.store.CreateOperation(ctx, &store.Operation{TenantID: "acme", OperationID: id, Kind: store.OperationGracefulDelete,
			Request: req, Deadline: e.now.Add(time.Hour)}))
	}
	j := e.start(nil)
	require.NoError(t, j.Queue().RunOperation(ctx, "acme", "too-many"))
	require.NoError(t, j.Queue().RunOperation(ctx, "acme", "child"))
	ended := func(id string) *store.Operation {
		var op *store.Operation
		testwait.Until(t, time.Minute, "operation "+id+" ends", func() bool {
			var err error
			op, err = e.store.GetOperation(ctx, &store.GetOperationParams{TenantID: "acme", OperationID: id})
			require.NoError(t, err)
			return op.State != store.OperationPending && op.State != store.OperationRunning
		})
		return op
	}

	op := ended("too-many")
	require.Equal(t, store.OperationFailed, op.State)
	require.Contains(t, op.Error, "at most 1000 roots")
	op = ended("child")
	require.Equal(t, store.OperationFailed, op.State)
	require.Contains(t, op.Error, store.ErrSubOrchestration.Error())
	testwait.Until(t, time.Minute, "the jobs complete", func() bool {
		var done int
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+janitor.DefaultSchema+`.river_job WHERE kind = 'orchard.operation' AND state = 'completed'`).Scan(&done))
		return done == 2
	})
	rows, err := e.pool.Query(ctx, `SELECT attempt FROM `+janitor.DefaultSchema+`.river_job WHERE kind = 'orchard.operation'`)
	require.NoError(t, err)
	attempts, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, attempts, "a refusal is not retried")

	recs := e.audit("acme", store.AuditGracefulDelete)
	require.Len(t, recs, 1, "only the second operation began deleting")
	require.False(t, recs[0].FinishedAt.IsZero(), "the record of a failed operation ends")
	require.Contains(t, recs[0].Error, store.ErrSubOrchestration.Error())
	require.False(t, recs[0].Result.Complete)
	require.Equal(t, int64(1), recs[0].Result.Instances, "the root deleted before the refusal")
	e.requireConsistent("acme")
}

// TestEraseTenant: every row of the tenant goes, in every table of the
// schema (read from the catalog, so a new table cannot be forgotten),
// except one tombstone audit record; other tenants are untouched.
func TestEraseTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.generate(datagen.Spec{Tenants: []string{"gone", "stays"}, InstancesPerTenant: 3000, ExecutionsPerInstance: 2, EventsPerExecution: 2,
		Completed: 0.5, Trees: 100, ChildrenPerTree: 2, Tags: map[string][]string{"env": {"prod", "dev"}}, Seed: 4})
	for _, tenant := range []string{"gone", "stays"} {
		_, err := e.store.RegisterDefinition(ctx, &store.RegisterDefinitionParams{TenantID: tenant, Name: "d", Version: "1", Document: json.RawMessage(`{}`)})
		require.NoError(t, err)
		require.NoError(t, e.store.StartAudit(ctx, &store.AuditRecord{TenantID: tenant, RecordID: "r1", Actor: "me", Role: "client", Action: store.AuditDeleteInstance}))
		_, err = e.store.StartJanitorRun(ctx, &store.StartJanitorRunParams{TenantID: tenant})
		require.NoError(t, err)
		_, err = e.store.Enqueue(ctx, &store.EnqueueParams{TenantID: tenant, InstanceID: e.runningInstance(tenant), Message: store.Message{Kind: "k"}})
		require.NoError(t, err)
	}
	require.NoError(t, e.store.CreateOperation(ctx, &store.Operation{TenantID: "gone", OperationID: "op", Kind: store.OperationGracefulDelete,
		Request: json.RawMessage(`{}`), Deadline: e.now}))
	stays := e.tenantRows("stays")
	deleting := store.TenantDeleting
	_, err := e.store.UpdateTenant(ctx, &store.UpdateTenantParams{TenantID: "gone", State: &deleting})
	require.NoError(t, err)

	j := e.start(func(c *janitor.Config) { c.EraseRowsPerStep, c.JobBudget = 2000, 50*time.Millisecond })
	_, err = j.Queue().EraseTenant(ctx, "gone", 0)
	require.NoError(t, err)
	testwait.Until(t, 2*time.Minute, "the erasure", func() bool {
		recs := e.audit("gone", store.AuditEraseTenant)
		return len(recs) == 1 && !recs[0].FinishedAt.IsZero()
	})
	left := e.tenantRows("gone")
	require.Equal(t, map[string]int64{"audit_records": 1}, left, "only the tombstone is left (finished, it holds its counts itself: no tally)")
	tomb := e.audit("gone", "")
	require.Len(t, tomb, 1)
	require.Equal(t, store.AuditEraseTenant, tomb[0].Action)
	require.True(t, tomb[0].Result.Complete)
	require.Greater(t, tomb[0].Result.Rows, int64(3000*4))
	require.Equal(t, stays, e.tenantRows("stays"), "another tenant is untouched")
	_, err = e.store.GetTenant(ctx, &store.GetTenantParams{TenantID: "gone"})
	require.ErrorIs(t, err, store.ErrNotFound)
}

// runningInstance is the id of one of the tenant's running instances (an
// ended one takes no message).
func (e *env) runningInstance(tenant string) string {
	var id string
	require.NoError(e.t, e.pool.QueryRow(e.t.Context(), `SELECT instance_id FROM instances WHERE tenant_id = $1 AND status = 'Running' LIMIT 1`, tenant).Scan(&id))
	return id
}

// tenantRows counts a tenant's rows in every table that has a tenant_id
// column, from the catalog; tables without any are left out.
func (e *env) tenantRows(tenant string) map[string]int64 {
	rows, err := e.pool.Query(e.t.Context(), `SELECT table_name FROM information_schema.columns
		WHERE column_name = 'tenant_id' AND table_schema = current_schema() ORDER BY table_name`)
	require.NoError(e.t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(e.t, err)
	require.ElementsMatch(e.t, crdb.TenantTables(), tables, "erasure knows every table with tenant rows")
	out := map[string]int64{}
	for _, table := range tables {
		var n int64
		require.NoError(e.t, e.pool.QueryRow(e.t.Context(), fmt.Sprintf(`SELECT count(*) FROM %s WHERE tenant_id = $1`, pgx.Identifier{table}.Sanitize()), tenant).Scan(&n))
		if n > 0 {
			out[table] = n
		}
	}
	return out
}
