package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/janitor"
)

// withJanitor runs a janitor beside the system's API and dispatcher, its
// River tables in the same database, and gives the API its queue.
func withJanitor(t *testing.T) systemOption {
	return func(s *testsystem.System, cfg *api.Config) {
		_, err := janitor.Migrate(t.Context(), s.Pool, "")
		require.NoError(t, err)
		j, err := janitor.New(janitor.Config{
			Store: s.Store, RiverPool: s.Pool, Interval: time.Hour, Logger: quiet(), Unpaced: true,
			PollInterval: 20 * time.Millisecond, OperationPoll: 20 * time.Millisecond,
		})
		require.NoError(t, err)
		require.NoError(t, j.Start(context.WithoutCancel(t.Context())))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = j.Stop(ctx)
		})
		cfg.Janitor, cfg.EraseGrace = j.Queue(), time.Nanosecond
	}
}

// TestSystemJanitor drives the janitor through the public API: a graceful
// delete of a running tree, the preview and a triggered retention run that
// deletes what it said, the audit log of each, and a tenant's erasure.
func TestSystemJanitor(t *testing.T) {
	t.Parallel()
	s := newSystem(t, withJanitor(t))
	ctx := t.Context()
	c := s.client(tenancy.RoleClient)
	s.register(s.client(tenancy.RoleTenantAdmin), testsystem.WaiterDef, testsystem.ParentDef)

	// A running parent waits for its running child.
	_, err := c.Start(ctx, "parent", nil, sdk.WithInstanceID("tree"))
	require.NoError(t, err)
	testwait.Until(t, 30*time.Second, "the child", func() bool {
		in, err := c.Get(ctx, "tree-child")
		return err == nil && in.Status == sdk.StatusRunning
	})
	_, err = c.Delete(ctx, "tree", false)
	require.ErrorIs(t, err, sdk.ErrFailedPrecondition, "a plain delete refuses a running tree")
	_, err = c.DeleteGracefully(ctx, "tree-child", 0)
	require.ErrorIs(t, err, sdk.ErrFailedPrecondition, "a sub-orchestration goes with its root only")
	opID, err := c.DeleteGracefully(ctx, "tree", 30*time.Second)
	require.NoError(t, err)
	var op *sdk.Operation
	testwait.Until(t, 30*time.Second, "the graceful delete", func() bool {
		op, err = c.Operation(ctx, opID)
		require.NoError(t, err)
		return op.Done()
	})
	require.Equal(t, sdk.OperationSucceeded, op.State, op.Error)
	require.Equal(t, int64(2), op.Counts.Instances, "the parent and its child")
	require.Equal(t, []string{"tree"}, op.InstanceIDs)
	_, err = c.Get(ctx, "tree-child")
	require.ErrorIs(t, err, sdk.ErrNotFound)

	// Three finished instances, and a policy that deletes completed ones at
	// once: the preview counts them, the run deletes them.
	for _, id := range []string{"w1", "w2", "w3"} {
		_, err := c.Start(ctx, "waiter", nil, sdk.WithInstanceID(id))
		require.NoError(t, err)
		require.NoError(t, c.RaiseEvent(ctx, id, "go", map[string]any{"id": id}))
		waitEnd(t, c, id)
	}
	// Deletes through the API are in the audit log too.
	_, err = c.Start(ctx, "waiter", nil, sdk.WithInstanceID("gone"))
	require.NoError(t, err)
	require.NoError(t, c.RaiseEvent(ctx, "gone", "go", nil))
	waitEnd(t, c, "gone")
	_, err = c.Delete(ctx, "gone", false)
	require.NoError(t, err)
	_, err = c.DeleteMany(ctx, sdk.DeleteSelection{InstanceIDs: []string{"nobody"}})
	require.NoError(t, err)

	tc := s.tenantClient()
	zero := time.Duration(0)
	_, err = tc.SetRetentionPolicy(ctx, sdk.RetentionPolicy{Default: sdk.RetentionRule{Completed: &zero}})
	require.NoError(t, err)
	preview, err := tc.PreviewRetention(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, int64(3), preview.Instances)
	require.False(t, preview.LowerBound)
	require.Len(t, preview.Groups, 1)
	require.Equal(t, sdk.RetentionPreviewGroup{Status: sdk.StatusCompleted, Name: "waiter", Instances: 3,
		Executions: preview.Executions, Events: preview.Events}, preview.Groups[0])
	week := 7 * 24 * time.Hour
	none, err := tc.PreviewRetention(ctx, &sdk.RetentionPolicy{Default: sdk.RetentionRule{Completed: &week}})
	require.NoError(t, err)
	require.Zero(t, none.Instances, "a candidate policy is judged, not the current one")

	ac := s.adminClient()
	jobs, queued, err := ac.TriggerRetention(ctx, tenant)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.LessOrEqual(t, queued, int64(1))
	testwait.Until(t, 30*time.Second, "the retention run", func() bool {
		for r, err := range ac.JanitorRuns(ctx, tenant) {
			require.NoError(t, err)
			if r.Complete {
				return true
			}
		}
		return false
	})
	var run *sdk.JanitorRun
	for r, err := range ac.JanitorRuns(ctx, tenant) {
		require.NoError(t, err)
		run = r
		break
	}
	require.Equal(t, preview.Instances, run.InstancesDeleted)
	require.Equal(t, preview.Events, run.EventsDeleted)
	// The sweep the janitor runs as it starts may come late on a loaded
	// machine, after the policy was set: it then queued this tenant's run
	// first, and the trigger found that one queued.
	require.Equal(t, queued == 1, run.Triggered, "the run is the triggered one unless the trigger found one queued")
	n, err := c.Count(ctx, sdk.Filter{})
	require.NoError(t, err)
	require.Zero(t, n.Total)

	// The audit log has both, for the tenant and for the platform.
	// The newest record of each action (the refused delete of the running
	// tree has one too, with its error).
	var actions map[string]*sdk.AuditRecord
	testwait.Until(t, 30*time.Second, "the retention audit record", func() bool {
		actions = map[string]*sdk.AuditRecord{}
		for r, err := range tc.AuditRecords(ctx, sdk.AuditFilter{}) {
			require.NoError(t, err)
			if actions[r.Action] == nil {
				actions[r.Action] = r
			}
		}
		rec := actions[store.AuditRetention]
		return rec != nil && !rec.FinishedAt.IsZero()
	})
	require.Equal(t, "test", actions[store.AuditGracefulDelete].Actor, "the token's subject")
	require.Equal(t, int64(2), actions[store.AuditGracefulDelete].Instances)
	require.Equal(t, store.ActorJanitor, actions[store.AuditRetention].Actor)
	var refused *sdk.AuditRecord
	for r, err := range tc.AuditRecords(ctx, sdk.AuditFilter{Action: store.AuditDeleteInstance}) {
		require.NoError(t, err)
		refused = r // the oldest
	}
	require.Contains(t, refused.Error, "running", "a refused delete is recorded with why")
	require.Zero(t, refused.Instances)
	require.Equal(t, int64(1), actions[store.AuditDeleteInstance].Instances)
	require.Contains(t, string(actions[store.AuditDeleteInstance].Request), `"gone"`)
	require.False(t, actions[store.AuditDeleteInstance].FinishedAt.IsZero())
	require.True(t, actions[store.AuditDeleteInstances].Complete)
	require.Contains(t, string(actions[store.AuditDeleteInstances].Request), `"nobody"`)
	require.Equal(t, int64(3), actions[store.AuditRetention].Instances)
	var platform int
	for r, err := range ac.AuditRecords(ctx, "", sdk.AuditFilter{Action: store.AuditRetention}) {
		require.NoError(t, err)
		require.Equal(t, tenant, r.TenantID)
		platform++
	}
	require.Equal(t, 1, platform)

	// Erasure: refused at once, then nothing left but the tombstone.
	erased, _, err := ac.EraseTenant(ctx, tenant)
	require.NoError(t, err)
	require.Equal(t, sdk.TenantDeleting, erased.State)
	_, err = c.Count(ctx, sdk.Filter{})
	require.ErrorIs(t, err, sdk.ErrPermissionDenied, "the tenant's tokens are refused")
	testwait.Until(t, 30*time.Second, "the erasure", func() bool {
		_, err := ac.GetTenant(ctx, tenant)
		return err != nil
	})
	var tomb []*sdk.AuditRecord
	testwait.Until(t, 30*time.Second, "the tombstone", func() bool {
		tomb = tomb[:0]
		for r, err := range ac.AuditRecords(ctx, tenant, sdk.AuditFilter{}) {
			require.NoError(t, err)
			tomb = append(tomb, r)
		}
		return len(tomb) == 1 && !tomb[0].FinishedAt.IsZero()
	})
	require.Equal(t, store.AuditEraseTenant, tomb[0].Action)
	require.Positive(t, tomb[0].Rows)
}
