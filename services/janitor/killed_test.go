package janitor_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb/datagen"
	"github.com/orchardhq/orchard/services/janitor"
)

// errKilled is what a call cut off after its commit returns.
var errKilled = errors.New("killed right after the commit")

// killAfterCommit is the janitor's store with one delete cut off right
// after it committed, as a process killed between a batch's commit and the
// code after it would be: what the call deleted is gone, and its result
// never reaches the job. The call cut off is the first of the kind named
// (DeleteExpired, DeleteInstance or EraseTenantRows) that deletes
// something after `after` such calls went through.
type killAfterCommit struct {
	janitor.Store
	kind  string
	after int

	mu     sync.Mutex
	calls  int
	killed bool
}

func (k *killAfterCommit) cut(kind string, deleted int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if kind != k.kind || k.killed || deleted == 0 {
		return false
	}
	k.calls++
	k.killed = k.calls > k.after
	return k.killed
}

func (k *killAfterCommit) wasKilled() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.killed
}

func (k *killAfterCommit) DeleteExpired(ctx context.Context, p *store.DeleteExpiredParams) (*store.DeleteResult, error) {
	res, err := k.Store.DeleteExpired(ctx, p)
	if err == nil && k.cut("DeleteExpired", res.InstancesDeleted) {
		return nil, errKilled
	}
	return res, err
}

func (k *killAfterCommit) DeleteInstance(ctx context.Context, p *store.DeleteInstanceParams) (*store.DeleteResult, error) {
	res, err := k.Store.DeleteInstance(ctx, p)
	if err == nil && k.cut("DeleteInstance", res.InstancesDeleted) {
		return nil, errKilled
	}
	return res, err
}

func (k *killAfterCommit) EraseTenantRows(ctx context.Context, p *store.EraseTenantRowsParams) (*store.EraseResult, error) {
	res, err := k.Store.EraseTenantRows(ctx, p)
	if err == nil {
		var rows int64
		for _, n := range res.Rows {
			rows += n
		}
		if k.cut("EraseTenantRows", rows) {
			return nil, errKilled
		}
	}
	return res, err
}

// totals counts a tenant's instances, executions and history events.
type totals struct{ instances, executions, events int64 }

func (e *env) totals(tenant string) totals {
	var t totals
	require.NoError(e.t, e.pool.QueryRow(e.t.Context(), `SELECT (SELECT count(*) FROM instances WHERE tenant_id = $1),
		(SELECT count(*) FROM executions WHERE tenant_id = $1), (SELECT count(*) FROM history WHERE tenant_id = $1)`, tenant).
		Scan(&t.instances, &t.executions, &t.events))
	return t
}

// tallies counts the audit tallies a tenant's records have left.
func (e *env) tallies(tenant string) int64 {
	var n int64
	require.NoError(e.t, e.pool.QueryRow(e.t.Context(), `SELECT count(*) FROM audit_tallies WHERE tenant_id = $1`, tenant).Scan(&n))
	return n
}

// TestRetentionKilledAfterABatchCountsExactly: a retention job loses the
// result of a batch that committed (killed between the commit and what
// follows it), fails, and is run again; its audit record counts exactly
// what went, the lost batch included.
func TestRetentionKilledAfterABatchCountsExactly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.generate(datagen.Spec{Tenants: []string{"acme"}, InstancesPerTenant: 3000, EventsPerExecution: 2, Completed: 1,
		Trees: 200, ChildrenPerTree: 2, Seed: 6})
	before := e.totals("acme")
	e.setPolicy("acme", store.RetentionPolicy{Default: store.Retention{Completed: new(time.Duration(0))}})
	killer := &killAfterCommit{Store: e.store, kind: "DeleteExpired", after: 2}
	e.start(func(c *janitor.Config) { c.Store, c.PageSize = killer, 100 })
	testwait.Until(t, time.Minute, "the job, run again after the kill", func() bool {
		recs := e.audit("acme", store.AuditRetention)
		return len(recs) == 1 && !recs[0].FinishedAt.IsZero()
	})
	require.True(t, killer.wasKilled(), "a batch was cut off after its commit")
	after := e.totals("acme")
	require.Zero(t, after.instances)
	rec := e.audit("acme", store.AuditRetention)[0]
	require.True(t, rec.Result.Complete)
	require.Equal(t, before.instances-after.instances, rec.Result.Instances, "instances")
	require.Equal(t, before.executions-after.executions, rec.Result.Executions, "executions")
	require.Equal(t, before.events-after.events, rec.Result.Events, "events")
	e.requireConsistent("acme")
	require.Zero(t, e.tallies("acme"), "a finished record holds its counts itself")
}

// TestGracefulDeleteKilledAfterARootCountsIt: a graceful delete loses the
// result of a root's delete that committed, fails, and is run again: the
// root is counted as deleted (not as skipped, though it is gone when the
// retry looks), in the operation and in the audit record.
func TestGracefulDeleteKilledAfterARootCountsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const roots = 20
	e.generate(datagen.Spec{Tenants: []string{"acme"}, InstancesPerTenant: roots, EventsPerExecution: 3, Completed: 1, Seed: 7})
	ids := e.instanceIDs("acme")
	require.Len(t, ids, roots)
	before := e.totals("acme")
	req, err := json.Marshal(janitor.GracefulDelete{InstanceIDs: ids, Actor: "me", Role: "client"})
	require.NoError(t, err)
	require.NoError(t, e.store.CreateOperation(ctx, &store.Operation{TenantID: "acme", OperationID: "op", Kind: store.OperationGracefulDelete,
		Request: req, Deadline: e.now.Add(time.Hour)}))

	killer := &killAfterCommit{Store: e.store, kind: "DeleteInstance", after: 5}
	j := e.start(func(c *janitor.Config) { c.Store = killer })
	require.NoError(t, j.Queue().RunOperation(ctx, "acme", "op"))
	var op *store.Operation
	testwait.Until(t, time.Minute, "the operation, run again after the kill", func() bool {
		op, err = e.store.GetOperation(ctx, &store.GetOperationParams{TenantID: "acme", OperationID: "op"})
		require.NoError(t, err)
		return op.State != store.OperationPending && op.State != store.OperationRunning
	})
	require.True(t, killer.wasKilled(), "a root's delete was cut off after its commit")
	require.Equal(t, store.OperationSucceeded, op.State, op.Error)
	var res janitor.GracefulDeleteResult
	require.NoError(t, json.Unmarshal(op.Result, &res))
	require.Empty(t, res.Skipped, "the root deleted before the kill is not skipped")
	require.Equal(t, roots, res.Done)
	require.Equal(t, before.instances, res.InstancesDeleted)
	require.Equal(t, before.executions, res.ExecutionsDeleted)
	require.Equal(t, before.events, res.EventsDeleted)
	require.Equal(t, totals{}, e.totals("acme"))
	recs := e.audit("acme", store.AuditGracefulDelete)
	require.Len(t, recs, 1)
	require.True(t, recs[0].Result.Complete)
	require.Equal(t, before.instances, recs[0].Result.Instances)
	require.Equal(t, before.executions, recs[0].Result.Executions)
	require.Equal(t, before.events, recs[0].Result.Events)
	require.Zero(t, e.tallies("acme"), "a finished record holds its counts itself")
}

// TestEraseKilledAfterAStepCountsExactly: an erasure loses the result of a
// step that committed, fails, and is run again: its tombstone counts
// exactly the rows the tenant had, and keeps no tally.
func TestEraseKilledAfterAStepCountsExactly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.generate(datagen.Spec{Tenants: []string{"gone"}, InstancesPerTenant: 1000, ExecutionsPerInstance: 2, EventsPerExecution: 2,
		Completed: 0.5, Trees: 50, ChildrenPerTree: 2, Seed: 8})
	require.NoError(t, e.store.StartAudit(ctx, &store.AuditRecord{TenantID: "gone", RecordID: "r1", Actor: "me", Role: "client", Action: store.AuditDeleteInstance}))
	var had int64
	for _, n := range e.tenantRows("gone") {
		had += n
	}
	deleting := store.TenantDeleting
	_, err := e.store.UpdateTenant(ctx, &store.UpdateTenantParams{TenantID: "gone", State: &deleting})
	require.NoError(t, err)

	killer := &killAfterCommit{Store: e.store, kind: "EraseTenantRows", after: 1}
	j := e.start(func(c *janitor.Config) { c.Store, c.EraseRowsPerStep = killer, 2000 })
	_, err = j.Queue().EraseTenant(ctx, "gone", 0)
	require.NoError(t, err)
	testwait.Until(t, 2*time.Minute, "the erasure, run again after the kill", func() bool {
		recs := e.audit("gone", store.AuditEraseTenant)
		return len(recs) == 1 && !recs[0].FinishedAt.IsZero()
	})
	require.True(t, killer.wasKilled(), "a step was cut off after its commit")
	require.Equal(t, map[string]int64{"audit_records": 1}, e.tenantRows("gone"), "only the tombstone is left")
	tomb := e.audit("gone", "")
	require.Len(t, tomb, 1)
	require.True(t, tomb[0].Result.Complete)
	require.Equal(t, had, tomb[0].Result.Rows, "the tombstone counts every row that went")
}
