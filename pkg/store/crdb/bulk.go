package crdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

// bulkPage is how many candidate roots a bulk delete reads at a time.
const bulkPage = 500

// DeleteInstanceBulk deletes the matching roots whose whole tree is
// terminal, in instance id order, until Limit trees are gone. Small trees go
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
	deleted, after := 0, ""
	for deleted < limit {
		roots, err := s.bulkCandidates(ctx, p.TenantID, &p.Filter, after, min(bulkPage, limit-deleted))
		if err != nil {
			return res, err
		}
		if len(roots) == 0 {
			res.Complete = true
			return res, nil
		}
		after = roots[len(roots)-1]
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
	}
	// The limit is reached: say whether anything is left.
	more, err := s.bulkCandidates(ctx, p.TenantID, &p.Filter, after, 1)
	if err != nil {
		return res, err
	}
	res.Complete = len(more) == 0
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

// bulkCandidates reads the next roots after the given id that match the
// filter and are terminal.
func (s *Store) bulkCandidates(ctx context.Context, tenantID string, f *store.InstanceFilter, after string, n int) ([]string, error) {
	return s.nextInstances(ctx, tenantID, f, true, after, n,
		"i.parent_instance_id IS NULL", "i.status IN ('Completed', 'Failed', 'Cancelled')")
}

// nextInstances reads, in id order after the given id, the ids of up to n
// instances matching the filter and the extra conditions.
func (s *Store) nextInstances(ctx context.Context, tenantID string, f *store.InstanceFilter, withDeleting bool, after string, n int, conds ...string) ([]string, error) {
	q := &query{}
	filterInstances(q, tenantID, f, withDeleting)
	q.conds = append(q.conds, conds...)
	q.where("i.instance_id > %s", q.arg(after))
	sql := fmt.Sprintf(`SELECT i.instance_id FROM instances i WHERE %s ORDER BY i.instance_id LIMIT %d`, q.whereSQL(), n)
	var ids []string
	err := s.retry(ctx, func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql, q.args...)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return ids, err
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
