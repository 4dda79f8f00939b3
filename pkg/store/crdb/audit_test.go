package crdb

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb/datagen"
)

// TestAuditTallies: a delete or prune under an audit record counts what
// each of its transactions removed into the record, in that transaction,
// so that the record read at any moment counts exactly the rows gone: a
// root deleted in pieces (one tally per piece, all of that root), a bulk
// delete of small trees many to a transaction, a bulk prune and the prune
// of one instance. FinishAudit folds a record's tallies into it without
// changing what it reads; pruning records takes their tallies too.
func TestAuditTallies(t *testing.T) {
	pool := testdb.Pool(t, 4)
	ctx := t.Context()
	now := time.Now().UTC()
	_, err := datagen.Generate(ctx, pool, datagen.Spec{
		Tenants: []string{"t"}, InstancesPerTenant: 600, ExecutionsPerInstance: 3, EventsPerExecution: 10, Completed: 1,
		Trees: 40, ChildrenPerTree: 2, Start: now.Add(-time.Hour), Spread: time.Minute, Seed: 1,
	})
	require.NoError(t, err)
	// An instance (3 executions of 10 events: 34 rows) is too big for one
	// transaction of piecewise's; whole trees go many to one of s's.
	s := New(pool, Options{})
	piecewise := New(pool, Options{MaxRowsPerTransaction: 20})

	type totals struct{ instances, executions, events int64 }
	count := func() totals {
		t.Helper()
		var c totals
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM instances WHERE tenant_id = 't'),
			(SELECT count(*) FROM executions WHERE tenant_id = 't'), (SELECT count(*) FROM history WHERE tenant_id = 't')`).
			Scan(&c.instances, &c.executions, &c.events))
		return c
	}
	gone := func(before totals) store.AuditResult {
		after := count()
		return store.AuditResult{Instances: before.instances - after.instances, Executions: before.executions - after.executions,
			Events: before.events - after.events}
	}
	start := func(id, action string) {
		t.Helper()
		require.NoError(t, s.StartAudit(ctx, &store.AuditRecord{TenantID: "t", RecordID: id, Actor: "me", Role: "client", Action: action}))
	}
	record := func(id string) store.AuditResult {
		t.Helper()
		recs, err := s.ListAuditRecords(ctx, &store.ListAuditRecordsParams{TenantID: "t"})
		require.NoError(t, err)
		for _, r := range recs {
			if r.RecordID == id {
				return r.Result
			}
		}
		t.Fatalf("no audit record %q", id)
		return store.AuditResult{}
	}
	tallies := func(id string) int64 {
		t.Helper()
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM audit_tallies WHERE tenant_id = 't' AND record_id LIKE $1`, id).Scan(&n))
		return n
	}

	var root string
	require.NoError(t, pool.QueryRow(ctx, `SELECT root_instance_id FROM instances WHERE tenant_id = 't' AND parent_instance_id IS NOT NULL
		ORDER BY root_instance_id LIMIT 1`).Scan(&root))
	start("one", store.AuditDeleteInstance)
	_, err = s.GetRootTally(ctx, &store.GetRootTallyParams{TenantID: "t", RecordID: "one", RootID: root})
	require.ErrorIs(t, err, store.ErrNotFound, "nothing deleted yet")
	before := count()
	one, err := piecewise.DeleteInstance(ctx, &store.DeleteInstanceParams{TenantID: "t", InstanceID: root, Audit: "one"})
	require.NoError(t, err)
	require.Equal(t, int64(3), one.InstancesDeleted, "the root and its two children")
	want := gone(before)
	require.Equal(t, store.AuditResult{Instances: one.InstancesDeleted, Executions: one.ExecutionsDeleted, Events: one.EventsDeleted}, want)
	require.Equal(t, want, record("one"))
	require.Greater(t, tallies("one"), int64(3), "a tally per transaction, pieces included")
	tally, err := s.GetRootTally(ctx, &store.GetRootTallyParams{TenantID: "t", RecordID: "one", RootID: root})
	require.NoError(t, err)
	require.Equal(t, want, *tally)

	start("bulk", store.AuditDeleteInstances)
	before = count()
	bulk, err := s.DeleteInstanceBulk(ctx, &store.DeleteInstanceBulkParams{TenantID: "t", Limit: 150, Audit: "bulk"})
	require.NoError(t, err)
	want = gone(before)
	require.Equal(t, store.AuditResult{Instances: bulk.InstancesDeleted, Executions: bulk.ExecutionsDeleted, Events: bulk.EventsDeleted}, want)
	require.Greater(t, want.Instances, int64(maxRootsPerTransaction), "more than one transaction")
	require.Equal(t, want, record("bulk"))

	start("prune", store.AuditPruneBulk)
	before = count()
	pruned, err := s.PruneExecutionsBulk(ctx, &store.PruneExecutionsBulkParams{TenantID: "t", Limit: 100,
		Options: store.PruneOptions{KeepLast: 1}, Audit: "prune"})
	require.NoError(t, err)
	want = gone(before)
	require.Equal(t, store.AuditResult{Executions: pruned.ExecutionsDeleted, Events: pruned.EventsDeleted}, want, "a prune deletes no instance")
	require.Positive(t, want.Executions)
	require.Equal(t, want, record("prune"))

	var chain string
	require.NoError(t, pool.QueryRow(ctx, `SELECT instance_id FROM instances WHERE tenant_id = 't' AND execution_count = 3
		ORDER BY instance_id LIMIT 1`).Scan(&chain))
	start("prune-one", store.AuditPruneExecutions)
	before = count()
	_, err = piecewise.PruneExecutions(ctx, &store.PruneExecutionsParams{TenantID: "t", InstanceID: chain,
		Options: store.PruneOptions{KeepLast: 1}, Audit: "prune-one"})
	require.NoError(t, err)
	want = gone(before)
	require.Equal(t, store.AuditResult{Executions: 2, Events: 20}, want)
	require.Equal(t, want, record("prune-one"))
	require.Equal(t, int64(2), tallies("prune-one"), "an execution a transaction")

	// Finishing folds the tallies into the record; what it reads is the same.
	want = record("bulk")
	require.NoError(t, s.FinishAudit(ctx, &store.FinishAuditParams{TenantID: "t", RecordID: "bulk", Complete: true, FinishedAt: now}))
	require.Zero(t, tallies("bulk"))
	want.Complete = true
	require.Equal(t, want, record("bulk"))
	requireInvariants(t, s)

	// Pruning records takes their tallies, those of unfinished ones too.
	require.Positive(t, tallies("%"))
	n, err := s.PruneAuditRecords(ctx, &store.PruneAuditRecordsParams{StartedBefore: time.Now().Add(time.Hour), Limit: 100})
	require.NoError(t, err)
	require.Equal(t, int64(4), n)
	require.Zero(t, tallies("%"))
	requireInvariants(t, s)
}
