package crdb

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
)

// An instance keeps its lease row while it can still need a turn: the
// turns that end theirs (Completed, Failed, Cancelled) delete it in the ack
// that ends them, beside turns of the same ack whose instances go on and
// keep theirs, free. The lease a fetch takes to consume a late message of
// an ended instance goes with the message.
func TestEndedInstancesKeepNoLeaseRow(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 4), Options{})
	ctx := t.Context()
	outcomes := map[string]store.Status{
		"completed": store.StatusCompleted, "failed": store.StatusFailed, "cancelled": store.StatusCancelled,
		"running": store.StatusRunning, "continued": store.StatusContinuedAsNew,
	}
	for id := range outcomes {
		_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{
			TenantID: "t", InstanceID: id, Name: "n", Start: store.Message{Kind: "start"}})
		require.NoError(t, err)
	}
	items, err := s.FetchOrchestrationItems(ctx, &store.FetchOrchestrationItemsParams{
		FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: "t", LeaseDuration: time.Minute}, Max: len(outcomes)})
	require.NoError(t, err)
	require.Len(t, items, len(outcomes))
	var turns []*store.AckOrchestrationItemParams
	for _, it := range items {
		p := &store.AckOrchestrationItemParams{Lease: it.Lease, ExecutionID: 1, MessageIDs: []string{it.Messages[0].ID},
			Status: outcomes[it.Lease.InstanceID]}
		if p.Status == store.StatusContinuedAsNew {
			p.ContinueAsNew = &store.ContinueAsNew{Start: store.Message{Kind: "start"}}
		}
		// The running one messages an ended one as it ends.
		if p.Status == store.StatusRunning {
			p.Messages = []store.OutgoingMessage{{InstanceID: "failed", Message: store.Message{Kind: "late"}}}
		}
		turns = append(turns, p)
	}
	errs, err := s.AckOrchestrationItems(ctx, &store.AckOrchestrationItemsParams{Turns: turns})
	require.NoError(t, err)
	for i, e := range errs {
		require.NoError(t, e, turns[i].Lease.InstanceID)
	}
	requireInvariants(t, s)
	leases := func() []string {
		rows, err := s.pool.Query(ctx, `SELECT instance_id FROM instance_leases WHERE tenant_id = 't' AND leased_until = 0 ORDER BY instance_id`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ids
	}
	require.Equal(t, []string{"continued", "running"}, leases())
	require.EqualValues(t, 1, count(t, s, `SELECT count(*) FROM orchestrator_queue WHERE tenant_id = 't' AND instance_id = 'failed'`))

	// The next fetch takes the one continued as new; the one after finds
	// no work and consumes the late message, with the lease it took for it.
	next, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "t", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.NotNil(t, next)
	require.Equal(t, "continued", next.Lease.InstanceID)
	none, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "t", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Nil(t, none)
	require.Zero(t, count(t, s, `SELECT count(*) FROM orchestrator_queue WHERE tenant_id = 't' AND instance_id = 'failed'`))
	require.Equal(t, []string{"running"}, leases())
	require.EqualValues(t, 2, count(t, s, `SELECT count(*) FROM instance_leases WHERE tenant_id = 't'`), "and the one continued as new, leased")
}

// A free lease row of an ended instance, as versions that kept one wrote
// it, is what InvariantOwners reports; the instance's delete takes it.
func TestOldLeaseRowOfEndedInstanceGoesWithIt(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 4), Options{})
	ctx := t.Context()
	_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{
		TenantID: "t", InstanceID: "old", Name: "n", Start: store.Message{Kind: "start"}})
	require.NoError(t, err)
	item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "t", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.AckOrchestrationItem(ctx, &store.AckOrchestrationItemParams{Lease: item.Lease, ExecutionID: 1,
		MessageIDs: []string{item.Messages[0].ID}, Status: store.StatusCompleted}))
	exec(t, s, `INSERT INTO instance_leases (tenant_id, instance_id, lease_token, leased_until, due_at)
		VALUES ('t', 'old', gen_random_uuid(), 0, `+noneDue+`)`)
	require.ErrorContains(t, s.CheckInvariants(ctx), "ended instance with a free lease")

	res, err := s.DeleteInstance(ctx, &store.DeleteInstanceParams{TenantID: "t", InstanceID: "old"})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.InstancesDeleted)
	require.Zero(t, count(t, s, `SELECT count(*) FROM instance_leases`))
	requireInvariants(t, s)
}
