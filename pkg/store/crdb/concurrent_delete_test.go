package crdb

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb/datagen"
)

// TestTwoDeletesAtOnceBothCommit: the janitor runs two bulk deletes at once.
// Two transactions of maxRootsPerTransaction trees each, the first still
// open when the second commits, must both commit: each keeps predicate
// locks only on index pages, which deletes do not write, and on the heap
// pages of which it read more than two rows (none here: the tenant is big
// enough that a hundred roots seldom share a page), and takes its instances
// off a counter row of its own. Both work under one audit record, as the
// batches of one retention job do, and each inserts its own tally row of
// it (adding into one row from both would roll one back). Interleaved by
// hand, so the overlap does not depend on timing. With several hundred
// roots a transaction, the first would lock the whole of instances and one
// of the two would roll back.
func TestTwoDeletesAtOnceBothCommit(t *testing.T) {
	pool := testdb.Pool(t, 4)
	s := New(pool, Options{})
	ctx := t.Context()
	now := time.Now().UTC()
	const n = 20_000
	_, err := datagen.Generate(ctx, pool, datagen.Spec{
		Tenants: []string{"t"}, InstancesPerTenant: n, EventsPerExecution: 10, Completed: 1,
		Start: now.Add(-time.Hour), Spread: time.Minute, Seed: 1,
	})
	require.NoError(t, err)
	require.NoError(t, datagen.Analyze(ctx, pool))
	// The oldest roots, in completion order as the janitor reads them, and
	// the roots of a page later.
	roots := func(offset int) []bulkKey {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT completed_at, instance_id FROM instances WHERE tenant_id = 't'
			ORDER BY completed_at, instance_id LIMIT $1 OFFSET $2`, maxRootsPerTransaction, offset)
		require.NoError(t, err)
		keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bulkKey, error) {
			var k bulkKey
			return k, r.Scan(&k.completedAt, &k.id)
		})
		require.NoError(t, err)
		require.Len(t, keys, maxRootsPerTransaction)
		return keys
	}
	first, second := roots(0), roots(bulkPage)
	require.NoError(t, s.StartAudit(ctx, &store.AuditRecord{TenantID: "t", RecordID: "job", Actor: store.ActorJanitor,
		Role: store.ActorJanitor, Action: store.AuditRetention}))

	delete := func(tx pgx.Tx, roots []bulkKey) {
		t.Helper()
		r, big, handled, trees, err := s.deleteSmallTrees(ctx, tx, "t", roots, "job")
		require.NoError(t, err)
		require.Empty(t, big)
		require.Equal(t, len(roots), handled)
		require.Equal(t, len(roots), trees)
		require.Equal(t, int64(10*len(roots)), r.EventsDeleted)
	}
	a, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	defer func() { _ = a.Rollback(ctx) }()
	delete(a, first)
	b, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	defer func() { _ = b.Rollback(ctx) }()
	delete(b, second)
	require.NoError(t, b.Commit(ctx), "the second delete")
	require.NoError(t, a.Commit(ctx), "the first delete, open while the second committed")

	var left int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM instances WHERE tenant_id = 't'").Scan(&left))
	require.Equal(t, int64(n-2*maxRootsPerTransaction), left)
	recs, err := s.ListAuditRecords(ctx, &store.ListAuditRecordsParams{TenantID: "t"})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, store.AuditResult{Instances: 2 * maxRootsPerTransaction, Executions: 2 * maxRootsPerTransaction,
		Events: 2 * 10 * maxRootsPerTransaction}, recs[0].Result, "the record counts both")
	requireInvariants(t, s)
}
