package api_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb/datagen"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/services/api"
)

// resultLost is the API's store with the results of bulk deletes and
// prunes lost after they committed, as when the API server dies between
// the store's last commit and its finishing of the audit record.
type resultLost struct{ api.Store }

var errResultLost = errors.New("result lost after the commit")

func (r *resultLost) DeleteInstanceBulk(ctx context.Context, p *store.DeleteInstanceBulkParams) (*store.BulkDeleteResult, error) {
	if _, err := r.Store.DeleteInstanceBulk(ctx, p); err != nil {
		return nil, err
	}
	return nil, errResultLost
}

func (r *resultLost) PruneExecutionsBulk(ctx context.Context, p *store.PruneExecutionsBulkParams) (*store.BulkPruneResult, error) {
	if _, err := r.Store.PruneExecutionsBulk(ctx, p); err != nil {
		return nil, err
	}
	return nil, errResultLost
}

// TestAuditCountsWhatWentWhenTheResultIsLost: a bulk delete and a bulk
// prune through the API whose results never come back from the store
// (the call fails) still leave audit records that count exactly what went:
// each transaction counted it into the record as it committed.
func TestAuditCountsWhatWentWhenTheResultIsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.Store = &resultLost{Store: c.Store} })
	ctx := t.Context()
	now := time.Now()
	_, err := datagen.Generate(ctx, e.Pool, datagen.Spec{Tenants: []string{"acme"}, InstancesPerTenant: 300, ExecutionsPerInstance: 3,
		EventsPerExecution: 2, Completed: 1, Trees: 20, ChildrenPerTree: 2, Start: now.Add(-time.Hour), Spread: time.Minute, Seed: 9})
	require.NoError(t, err)
	type totals struct{ instances, executions, events int64 }
	count := func() totals {
		var c totals
		require.NoError(t, e.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM instances WHERE tenant_id = 'acme'),
			(SELECT count(*) FROM executions WHERE tenant_id = 'acme'), (SELECT count(*) FROM history WHERE tenant_id = 'acme')`).
			Scan(&c.instances, &c.executions, &c.events))
		return c
	}
	c := e.all("acme")
	record := func(action string) *orchardv1.AuditRecord {
		resp, err := c.tenant.ListAuditRecords(ctx, req(&orchardv1.ListAuditRecordsRequest{Action: action}))
		require.NoError(t, err)
		require.Len(t, resp.Msg.Records, 1)
		return resp.Msg.Records[0]
	}

	before := count()
	_, err = c.client.PruneExecutionsBulk(ctx, req(&orchardv1.PruneExecutionsBulkRequest{All: true, Limit: 100,
		Options: &orchardv1.PruneOptions{KeepLast: 1}}))
	require.Error(t, err)
	after := count()
	require.Positive(t, before.executions-after.executions, "the prune committed")
	rec := record(store.AuditPruneBulk)
	require.Contains(t, rec.Error, errResultLost.Error())
	require.Equal(t, before.executions-after.executions, rec.Executions)
	require.Equal(t, before.events-after.events, rec.Events)

	before = after
	_, err = c.client.DeleteInstances(ctx, req(&orchardv1.DeleteInstancesRequest{All: true, Limit: 150}))
	require.Error(t, err)
	after = count()
	require.Positive(t, before.instances-after.instances, "the delete committed")
	rec = record(store.AuditDeleteInstances)
	require.Contains(t, rec.Error, errResultLost.Error())
	require.Equal(t, before.instances-after.instances, rec.Instances)
	require.Equal(t, before.executions-after.executions, rec.Executions)
	require.Equal(t, before.events-after.events, rec.Events)
}
