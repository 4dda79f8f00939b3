package crdb

import (
	"context"
	"errors"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

// bulkPage is how many candidate roots a bulk delete reads at a time.
const bulkPage = 500

// maxRootsPerTransaction bounds the trees one delete transaction reads, so
// that two such deletes can run at once on PostgreSQL without rolling each
// other back (TestTwoDeletesAtOnceBothCommit). Serializable isolation
// leaves a delete no predicate lock (SIREAD) on a row it read and then
// removed; it keeps those on index pages, which deletes do not write. But
// the rows TreeMembers reads (a row of instances per member) are locked
// until the delete, and past max_pred_locks_per_transaction / 2 of a table
// (128 on the servers the tests start) they become one lock on the whole
// table, with which every delete from it by another transaction conflicts.
// 100 roots stay below that, and at about a dozen rows per tree within the
// row budget, so each root is read once. (Past two rows of one heap page
// they become a lock on the page: roots a page of candidates apart seldom
// share one.)
const maxRootsPerTransaction = 100

// DeleteInstanceBulk deletes the matching roots whose whole tree is
// terminal, oldest completion first, until Limit trees are gone. Small trees go
// many to a transaction; a tree bigger than one transaction goes through
// DeleteInstance. Instances an interrupted delete left behind match again
// and are finished.
func (s *Store) DeleteInstanceBulk(ctx context.Context, p *store.DeleteInstanceBulkParams) (*store.BulkDeleteResult, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	if err := validateFilter(&p.Filter); err != nil {
		return nil, err
	}
	limit, err := bulkLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	res := &store.BulkDeleteResult{}
	deleted := 0
	after := bulkKey{completedAt: math.MinInt64}
	for deleted < limit {
		// One more than the page: whether anything is left after it.
		want := min(bulkPage, limit-deleted)
		keys, err := s.bulkCandidates(ctx, p.TenantID, &p.Filter, after, want+1)
		if err != nil {
			return res, err
		}
		more := len(keys) > want
		keys = keys[:min(len(keys), want)]
		if len(keys) == 0 {
			res.Complete = true
			return res, nil
		}
		after = keys[len(keys)-1]
		step, trees, err := s.deleteTrees(ctx, p.TenantID, keys, p.Audit)
		res.Add(step)
		deleted += trees
		if err != nil {
			return res, err
		}
		if !more {
			res.Complete = true
			return res, nil
		}
	}
	return res, nil
}

// bulkLimit applies the default to a bulk operation's limit.
func bulkLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return store.DefaultBulkLimit, nil
	case limit < 0:
		return 0, invalid("negative limit %d", limit)
	}
	return limit, nil
}

// bulkKey is a position in the order of bulk delete candidates:
// completion time, then instance id, the order of instances_completed.
type bulkKey struct {
	completedAt int64
	id          string
}

// bulkCandidates reads the next terminal roots after the given position
// that match the filter, oldest completion first. Only terminal instances
// have a completion time, and deleted ones leave the index, so the scan
// starts at the next candidate instead of wading through the running
// instances and what earlier calls deleted, and retention cutoffs
// (completed before) read only what they delete.
func (s *Store) bulkCandidates(ctx context.Context, tenantID string, f *store.InstanceFilter, after bulkKey, n int) ([]bulkKey, error) {
	sql, args := bulkCandidatesQuery(tenantID, f, after, n)
	var keys []bulkKey
	err := s.retry(ctx, func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql, customPlan(args)...)
		if err != nil {
			return err
		}
		keys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (bulkKey, error) {
			var k bulkKey
			return k, r.Scan(&k.completedAt, &k.id)
		})
		return err
	})
	return keys, err
}

// bulkCandidatesQuery builds the statement of bulkCandidates.
func bulkCandidatesQuery(tenantID string, f *store.InstanceFilter, after bulkKey, n int) (sql string, args namedArgs) {
	q := &query{}
	filterInstances(q, tenantID, f, true)
	q.where("i.parent_instance_id IS NULL")
	q.where("i.status IN ('Completed', 'Failed', 'Cancelled')")
	q.where("i.completed_at IS NOT NULL")
	q.where("(i.completed_at, i.instance_id) > (%s, %s)", q.arg("after_completed_at", after.completedAt), q.arg("after_id", after.id))
	return `SELECT i.completed_at, i.instance_id FROM instances i
WHERE ` + q.whereSQL() + `
ORDER BY i.completed_at, i.instance_id LIMIT ` + strconv.Itoa(n), q.args
}

// DeleteExpired deletes the trees of roots the janitor judged expired,
// skipping any root replaced since (another completion time) and any tree
// a member of which runs.
func (s *Store) DeleteExpired(ctx context.Context, p *store.DeleteExpiredParams) (*store.DeleteResult, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	if len(p.Roots) > store.MaxFilterIDs {
		return nil, invalid("at most %d roots in one call, got %d", store.MaxFilterIDs, len(p.Roots))
	}
	keys := make([]bulkKey, len(p.Roots))
	for i, c := range p.Roots {
		keys[i] = bulkKey{completedAt: c.CompletedAt.UnixMilli(), id: c.InstanceID}
	}
	res, _, err := s.deleteTrees(ctx, p.TenantID, keys, p.Audit)
	return &res, err
}

// deleteTrees deletes the trees of these roots, each only while its root
// is terminal with the completion time of its key and no member runs:
// small trees many to a transaction (at most maxRootsPerTransaction), a
// tree bigger than one transaction through DeleteInstance, each
// transaction tallying what it removed under the audit record. It reports
// how many trees it deleted.
func (s *Store) deleteTrees(ctx context.Context, tenantID string, roots []bulkKey, audit string) (store.DeleteResult, int, error) {
	var res store.DeleteResult
	deleted := 0
	for len(roots) > 0 {
		var step store.DeleteResult
		var big []string
		var handled, trees int
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			step, big, handled, trees, err = s.deleteSmallTrees(ctx, tx, tenantID, roots[:min(len(roots), maxRootsPerTransaction)], audit)
			return err
		})
		if err != nil {
			return res, deleted, err
		}
		s.purged(deletedRows(step))
		res.Add(step)
		deleted += trees
		for _, root := range big {
			r, err := s.DeleteInstance(ctx, &store.DeleteInstanceParams{TenantID: tenantID, InstanceID: root, Audit: audit})
			if errors.Is(err, store.ErrInstanceRunning) {
				continue // became busy since: skipped, like any running tree
			}
			if err != nil {
				return res, deleted, err
			}
			res.Add(*r)
			deleted++
		}
		roots = roots[handled:]
	}
	return res, deleted, nil
}

var (
	sqlTreeMembers        = stmt("TreeMembers")
	sqlDeleteInstanceRows = stmt("DeleteInstanceRows")
)

// doomed are the instances one statement deletes, with the subsets that own
// rows in the tables only some instances have rows in.
type doomed struct {
	ids, tagged, prunable, orchestratorQueued, workerQueued []string
}

// everything marks instances as owning rows everywhere, for callers that
// have not looked.
func everything(ids []string) doomed {
	return doomed{ids: ids, tagged: ids, prunable: ids, orchestratorQueued: ids, workerQueued: ids}
}

// treeMember is one instance of a tree deleteSmallTrees considers.
type treeMember struct {
	root, id                     string
	completedAt                  *int64
	terminal, running, deleting  bool
	executions, events           int64
	tagged                       bool
	orchestratorRows, workerRows int64
}

// deleteSmallTrees deletes, in one transaction, the trees of the first roots
// that fit in it whole. It reports how many roots it handled (deleted,
// skipped because the root was replaced or a member runs, or set aside as
// too big for one transaction) and how many trees it deleted, which it
// tallies under the audit record.
func (s *Store) deleteSmallTrees(ctx context.Context, tx pgx.Tx, tenantID string, roots []bulkKey, audit string) (r store.DeleteResult, big []string, handled, trees int, err error) {
	ids := make([]string, len(roots))
	for i, k := range roots {
		ids[i] = k.id
	}
	rows, err := tx.Query(ctx, sqlTreeMembers, namedArgs{"tenant_id": tenantID, "roots": ids})
	if err != nil {
		return r, nil, 0, 0, err
	}
	type tree struct {
		members []treeMember
		cost    int64
		root    treeMember // the zero member when the root is gone
		running bool
	}
	byRoot := map[string]*tree{}
	var m treeMember
	_, err = pgx.ForEachRow(rows, []any{&m.root, &m.id, &m.completedAt, &m.terminal, &m.running, &m.deleting,
		&m.executions, &m.events, &m.tagged, &m.orchestratorRows, &m.workerRows}, func() error {
		t := byRoot[m.root]
		if t == nil {
			t = &tree{}
			byRoot[m.root] = t
		}
		t.members = append(t.members, m)
		if m.id == m.root {
			t.root = m
		}
		t.cost += 1 + m.executions + m.events + m.orchestratorRows + m.workerRows
		t.running = t.running || (m.running && !m.deleting)
		return nil
	})
	if err != nil {
		return r, nil, 0, 0, err
	}
	budget := s.opts.MaxRowsPerTransaction
	var d doomed
	for _, k := range roots {
		t := byRoot[k.id]
		switch {
		case t == nil || t.running || !t.root.terminal ||
			t.root.completedAt == nil || *t.root.completedAt != k.completedAt:
			// Gone or replaced meanwhile, or a member still runs: skipped.
		case t.cost > s.opts.MaxRowsPerTransaction:
			big = append(big, k.id)
		case t.cost > budget:
			// Full: the next transaction takes it.
			return s.finishSmallTrees(ctx, tx, tenantID, d, big, handled, trees, audit)
		default:
			for _, m := range t.members {
				d.add(m)
			}
			budget -= t.cost
			trees++
		}
		handled++
	}
	return s.finishSmallTrees(ctx, tx, tenantID, d, big, handled, trees, audit)
}

func (d *doomed) add(m treeMember) {
	d.ids = append(d.ids, m.id)
	if m.tagged || m.deleting {
		d.tagged = append(d.tagged, m.id)
	}
	if m.executions > 1 || m.deleting {
		d.prunable = append(d.prunable, m.id)
	}
	if m.orchestratorRows > 0 || m.deleting {
		d.orchestratorQueued = append(d.orchestratorQueued, m.id)
	}
	if m.workerRows > 0 || m.deleting {
		d.workerQueued = append(d.workerQueued, m.id)
	}
}

func (s *Store) finishSmallTrees(ctx context.Context, tx pgx.Tx, tenantID string, d doomed, big []string, handled, trees int, audit string) (store.DeleteResult, []string, int, int, error) {
	if len(d.ids) == 0 {
		return store.DeleteResult{}, big, handled, trees, nil
	}
	r, err := deleteRows(ctx, tx, tenantID, d, audit, nil)
	return r, big, handled, trees, err
}
