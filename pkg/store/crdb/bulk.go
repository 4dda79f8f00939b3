package crdb

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

// bulkPage is how many candidate roots a bulk delete reads at a time.
const bulkPage = 500

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
		roots := make([]string, len(keys))
		for i, k := range keys {
			roots[i] = k.id
		}
		for len(roots) > 0 {
			var step store.DeleteResult
			var big []string
			var handled, trees int
			err := s.inTx(ctx, func(tx pgx.Tx) error {
				var err error
				step, big, handled, trees, err = s.deleteSmallTrees(ctx, tx, p.TenantID, roots)
				return err
			})
			if err != nil {
				return res, err
			}
			s.purged(deletedRows(step))
			res.Add(step)
			deleted += trees
			for _, root := range big {
				r, err := s.DeleteInstance(ctx, &store.DeleteInstanceParams{TenantID: p.TenantID, InstanceID: root})
				if errors.Is(err, store.ErrInstanceRunning) {
					continue // became busy since: skipped, like any running tree
				}
				if err != nil {
					return res, err
				}
				res.Add(*r)
				deleted++
			}
			roots = roots[handled:]
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
// instances and what earlier calls deleted (in id order it read 11,000
// entries for 200 candidates after a few calls), and retention cutoffs
// (completed before) read only what they delete.
func (s *Store) bulkCandidates(ctx context.Context, tenantID string, f *store.InstanceFilter, after bulkKey, n int) ([]bulkKey, error) {
	q := &query{}
	filterInstances(q, tenantID, f, true)
	q.where("i.parent_instance_id IS NULL")
	q.where("i.status IN ('Completed', 'Failed', 'Cancelled')")
	q.where("i.completed_at IS NOT NULL")
	q.where("(i.completed_at, i.instance_id) > (%s, %s)", q.arg(after.completedAt), q.arg(after.id))
	sql := fmt.Sprintf(`SELECT i.completed_at, i.instance_id FROM instances i WHERE %s
ORDER BY i.completed_at, i.instance_id LIMIT %d`, q.whereSQL(), n)
	var keys []bulkKey
	err := s.retry(ctx, func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql, customPlan(q.args)...)
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

// deleteSmallTrees deletes, in one transaction, the trees of the first roots
// that fit in it whole. It reports how many roots it handled (deleted,
// skipped because a member runs, or set aside as too big for one
// transaction) and how many trees it deleted.
func (s *Store) deleteSmallTrees(ctx context.Context, tx pgx.Tx, tenantID string, roots []string) (r store.DeleteResult, big []string, handled, trees int, err error) {
	rows, err := tx.Query(ctx, `
SELECT i.root_instance_id, i.instance_id, i.status = 'Running' AND NOT i.deleting,
	1 + i.execution_count + i.event_count
	+ (SELECT count(*) FROM orchestrator_queue q WHERE q.tenant_id = $1 AND q.instance_id = i.instance_id)
	+ (SELECT count(*) FROM worker_queue w WHERE w.tenant_id = $1 AND w.instance_id = i.instance_id)
FROM instances i WHERE i.tenant_id = $1 AND i.root_instance_id = ANY($2::TEXT[])`, tenantID, roots)
	if err != nil {
		return r, nil, 0, 0, err
	}
	type tree struct {
		ids     []string
		cost    int64
		running bool
	}
	byRoot := map[string]*tree{}
	for rows.Next() {
		var root, id string
		var running bool
		var cost int64
		if err := rows.Scan(&root, &id, &running, &cost); err != nil {
			rows.Close()
			return r, nil, 0, 0, err
		}
		t := byRoot[root]
		if t == nil {
			t = &tree{}
			byRoot[root] = t
		}
		t.ids = append(t.ids, id)
		t.cost += cost
		t.running = t.running || running
	}
	if err := rows.Err(); err != nil {
		return r, nil, 0, 0, err
	}
	budget := s.opts.MaxRowsPerTransaction
	var ids []string
	for _, root := range roots {
		t := byRoot[root]
		switch {
		case t == nil || t.running:
			// Gone meanwhile, or a member still runs: skipped.
		case t.cost > s.opts.MaxRowsPerTransaction:
			big = append(big, root)
		case t.cost > budget:
			// Full: the next transaction takes it.
			return s.finishSmallTrees(ctx, tx, tenantID, ids, big, handled, trees)
		default:
			ids = append(ids, t.ids...)
			budget -= t.cost
			trees++
		}
		handled++
	}
	return s.finishSmallTrees(ctx, tx, tenantID, ids, big, handled, trees)
}

func (s *Store) finishSmallTrees(ctx context.Context, tx pgx.Tx, tenantID string, ids, big []string, handled, trees int) (store.DeleteResult, []string, int, int, error) {
	if len(ids) == 0 {
		return store.DeleteResult{}, big, handled, trees, nil
	}
	r, err := deleteRows(ctx, tx, tenantID, ids)
	return r, big, handled, trees, err
}
