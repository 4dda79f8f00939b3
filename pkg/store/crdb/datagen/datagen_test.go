package datagen_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/store/crdb/datagen"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestGenerate fills two small tenants and checks that every stored counter
// and denormalised column agrees with the rows it summarises, and that the
// store reads the result as its own.
func TestGenerate(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t, 4)
	spec := datagen.Spec{
		Tenants:               []string{"a", "b"},
		InstancesPerTenant:    1500,
		ExecutionsPerInstance: 3,
		EventsPerExecution:    4,
		Completed:             0.6, Failed: 0.1, Cancelled: 0.1,
		Names:           []string{"alpha", "beta", "gamma"},
		Tags:            map[string][]string{"env": {"prod", "dev"}, "team": {"x", "y", "z"}},
		Trees:           20,
		ChildrenPerTree: 10,
		Start:           time.UnixMilli(1_700_000_000_000),
		Spread:          24 * time.Hour,
		Seed:            7,
		ChunkSize:       400,
	}
	res, err := datagen.Generate(ctx, pool, spec)
	require.NoError(t, err)
	count := func(sql string, args ...any) int64 {
		t.Helper()
		var n int64
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&n), sql)
		return n
	}
	// Only the running instances have a lease row, as the store writes.
	running := count(`SELECT count(*) FROM instances WHERE status = 'Running'`)
	require.Greater(t, running, int64(0))
	require.Less(t, running, int64(3000))
	require.Equal(t, datagen.Result{Tenants: 2, Instances: 3000, Executions: 9000, Events: 36000, Locks: running, Tags: 6000, Prunable: 3000, Elapsed: res.Elapsed}, res)

	require.EqualValues(t, 3000, count(`SELECT count(*) FROM instances`))
	require.EqualValues(t, 9000, count(`SELECT count(*) FROM executions`))
	require.EqualValues(t, 36000, count(`SELECT count(*) FROM history`))
	require.Equal(t, running, count(`SELECT count(*) FROM instance_leases l JOIN instances i USING (tenant_id, instance_id)
		WHERE l.leased_until = 0 AND i.status = 'Running'`))
	require.Equal(t, running, count(`SELECT count(*) FROM instance_leases`))

	// The rows keep every rule the store's own writes keep.
	s := crdb.New(pool, crdb.Options{})
	require.NoError(t, s.CheckInvariants(ctx))
	require.NotZero(t, count(`SELECT count(*) FROM instance_prunable`))
	// History is numbered 1..n in each execution.
	require.Zero(t, count(`SELECT count(*) FROM executions e
		WHERE e.event_count <> (SELECT COALESCE(max(event_id), 0) FROM history h WHERE h.tenant_id = e.tenant_id AND h.instance_id = e.instance_id AND h.execution_id = e.execution_id)`))
	require.Zero(t, count(`SELECT count(*) FROM history WHERE event_id < 1`))
	// Trees: 20 per tenant, each of 10 children under a root, finished
	// parents have finished children; every other instance is its own root.
	require.EqualValues(t, 400, count(`SELECT count(*) FROM instances WHERE parent_instance_id IS NOT NULL`))
	require.Zero(t, count(`SELECT count(*) FROM instances c LEFT JOIN instances p
		ON p.tenant_id = c.tenant_id AND p.instance_id = c.parent_instance_id
		WHERE c.parent_instance_id IS NOT NULL AND (p.instance_id IS NULL OR c.root_instance_id <> p.root_instance_id
			OR (p.status <> 'Running' AND c.status = 'Running'))`))
	require.Zero(t, count(`SELECT count(*) FROM instances WHERE parent_instance_id IS NULL AND root_instance_id <> instance_id`))
	// The draws follow the spec.
	require.InDelta(t, 0.2*3000, float64(running), 150)
	require.EqualValues(t, 3, count(`SELECT count(DISTINCT name) FROM instances`))
	require.EqualValues(t, 6, count(`SELECT count(DISTINCT tags) FROM instances`))
	require.Zero(t, count(`SELECT count(*) FROM instances WHERE created_at < $1::INT8 OR created_at >= $2::INT8 + 1000`,
		spec.Start.UnixMilli(), spec.Start.Add(spec.Spread).UnixMilli()))

	// InstanceAt says what was written.
	in := datagen.InstanceAt(spec, "b", 5)
	var status, name string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, name FROM instances WHERE tenant_id = 'b' AND instance_id = $1`,
		in.ID).Scan(&status, &name))
	require.Equal(t, in.Status, status)
	require.Equal(t, in.Name, name)

	// The store reads it as its own, and its deletes and prunes keep the
	// rules on it.
	counts, err := s.CountInstances(ctx, &store.CountInstancesParams{TenantID: "a"})
	require.NoError(t, err)
	require.EqualValues(t, 1500, counts.Total)
	tree, err := s.GetInstanceTree(ctx, &store.GetInstanceTreeParams{TenantID: "a", InstanceID: datagen.InstanceAt(spec, "a", 11).ID})
	require.NoError(t, err)
	require.Len(t, tree.IDs, 11)
	got, err := s.GetInstance(ctx, &store.GetInstanceParams{TenantID: "b", InstanceID: in.ID})
	require.NoError(t, err)
	require.EqualValues(t, 12, got.EventCount)
	require.EqualValues(t, 3, got.ExecutionCount)
	pruned, err := s.PruneExecutionsBulk(ctx, &store.PruneExecutionsBulkParams{TenantID: "a", Options: store.PruneOptions{KeepLast: 1}, Limit: 100})
	require.NoError(t, err)
	require.EqualValues(t, 100*2*4, pruned.EventsDeleted)
	deleted, err := s.DeleteInstanceBulk(ctx, &store.DeleteInstanceBulkParams{TenantID: "b", Limit: 50})
	require.NoError(t, err)
	// 50 trees: their roots, and the children of any tree root among them.
	require.GreaterOrEqual(t, deleted.InstancesDeleted, int64(50))
	require.EqualValues(t, deleted.InstancesDeleted*3, deleted.ExecutionsDeleted)
	require.EqualValues(t, deleted.ExecutionsDeleted*4, deleted.EventsDeleted)
	require.EqualValues(t, 1500-deleted.InstancesDeleted, count(`SELECT count(*) FROM instances WHERE tenant_id = 'b'`))
	require.Equal(t, count(`SELECT count(*) FROM instances WHERE tenant_id = 'b' AND status = 'Running'`),
		count(`SELECT count(*) FROM instance_leases WHERE tenant_id = 'b'`))
	require.EqualValues(t, 2*(1500-deleted.InstancesDeleted), count(`SELECT count(*) FROM instance_tags WHERE tenant_id = 'b'`))
	counts, err = s.CountInstances(ctx, &store.CountInstancesParams{TenantID: "b"})
	require.NoError(t, err)
	require.EqualValues(t, 1500-deleted.InstancesDeleted, counts.Total)
	require.NoError(t, s.CheckInvariants(ctx))
}
