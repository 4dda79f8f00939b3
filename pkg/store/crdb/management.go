package crdb

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

// instanceColumns are the columns scanInstance reads, from instances i and
// the current execution e.
const instanceColumns = `i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count`

const joinCurrentExecution = `LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id`

func defaultCursorKey() []byte {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return key
}

// customPlan runs a statement built from a filter with its arguments
// bound before planning (an unnamed statement, QueryExecModeExec), so the
// plan fits the values: a prepared statement's generic plan, chosen once
// for every value, scanned 27,000 instances for a one-day completion range
// that a plan knowing the day reads 150 for. Arguments must then have
// types pgx infers from Go: strings, int64, []string.
func customPlan(args []any) []any {
	return append([]any{pgx.QueryExecModeExec}, args...)
}

// ListInstances reads one page in keyset order: (order column, instance id).
func (s *Store) ListInstances(ctx context.Context, p *store.ListInstancesParams) (*store.ListInstancesResult, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	if err := validateFilter(&p.Filter); err != nil {
		return nil, err
	}
	col, desc, err := orderColumn(p.Order)
	if err != nil {
		return nil, err
	}
	limit := p.Limit
	switch {
	case limit == 0:
		limit = store.DefaultListLimit
	case limit < 0 || limit > store.MaxListLimit:
		return nil, invalid("limit must be between 1 and %d, got %d", store.MaxListLimit, limit)
	}
	order := p.Order
	if order == "" {
		order = store.OrderCreatedDesc
	}
	// In creation order, a tag filter reads the instances with its
	// driving tag from instance_tags, in that order, and stops at the page.
	q := &query{}
	from, key := "instances i", "i"
	tagKey, tagValue, byTag := drivingTag(&p.Filter)
	if byTag && col == "created_at" {
		q.byTag = true
		from, key = "instance_tags g JOIN instances i ON i.tenant_id = g.tenant_id AND i.instance_id = g.instance_id", "g"
	}
	filterInstances(q, p.TenantID, &p.Filter, false)
	if q.byTag {
		q.where("g.tenant_id = $1 AND g.tag_key = %s AND g.tag_value = %s", q.arg(tagKey), q.arg(tagValue))
	}
	dir, cmp := "ASC", ">"
	if desc {
		dir, cmp = "DESC", "<"
	}
	if p.Cursor != "" {
		pos, err := s.decodeCursor(p.TenantID, &p.Filter, order, p.Cursor)
		if err != nil {
			return nil, err
		}
		q.where("(%s.%s, %s.instance_id) %s (%s, %s)", key, col, key, cmp, q.arg(pos.Key), q.arg(pos.ID))
	}
	// The page's keys first, from an index, then their rows and current
	// executions: when the keys need sorting (a prefix scan), only the
	// page is joined, not every match.
	sql := fmt.Sprintf(`SELECT %s, i.%s
FROM (SELECT i.instance_id FROM %s WHERE %s ORDER BY %s.%s %s, %s.instance_id %s LIMIT %d) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
%s
ORDER BY i.%s %s, i.instance_id %s`,
		instanceColumns, col, from, q.whereSQL(), key, col, dir, key, dir, limit+1, joinCurrentExecution, col, dir, dir)

	var page []store.Instance
	var keys []int64
	err = s.retry(ctx, func(ctx context.Context) error {
		page, keys = page[:0], keys[:0]
		rows, err := s.pool.Query(ctx, sql, customPlan(q.args)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var key int64
			in, err := scanInstance(p.TenantID, rows, &key)
			if err != nil {
				return err
			}
			page, keys = append(page, *in), append(keys, key)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	res := &store.ListInstancesResult{Instances: page}
	if len(page) > limit {
		res.Instances = page[:limit]
		last := page[limit-1]
		res.NextCursor = s.encodeCursor(p.TenantID, cursorPosition{
			Version: 1, Order: string(order), Filter: filterDigest(&p.Filter), Key: keys[limit-1], ID: last.InstanceID,
		})
	}
	return res, nil
}

// countShards is how many rows of instance_counts hold a tenant's count of
// one status; writers add their deltas to one picked at random.
const countShards = 16

// countShard picks the counter shard a write adds its delta to.
func countShard() int64 { return mathrand.Int64N(countShards) }

// CountInstances counts the matching instances, grouped by status. With no
// filter but statuses, it sums the maintained counters (instance_counts):
// a few rows per status, whatever the size of the tenant. Any other filter
// counts the instances that match, through the listing indexes.
func (s *Store) CountInstances(ctx context.Context, p *store.CountInstancesParams) (*store.CountInstancesResult, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	if err := validateFilter(&p.Filter); err != nil {
		return nil, err
	}
	q := &query{}
	var sql string
	if byCounters(&p.Filter) {
		q.where("tenant_id = %s", q.arg(p.TenantID))
		if len(p.Filter.Statuses) > 0 {
			q.where("status = ANY(%s::TEXT[])", q.arg(statusStrings(p.Filter.Statuses)))
		}
		sql = `SELECT status, sum(n)::INT8 FROM instance_counts WHERE ` + q.whereSQL() + ` GROUP BY status HAVING sum(n) <> 0`
	} else {
		filterInstances(q, p.TenantID, &p.Filter, false)
		sql = `SELECT i.status, count(*) FROM instances i WHERE ` + q.whereSQL() + ` GROUP BY i.status`
	}
	var res *store.CountInstancesResult
	err := s.retry(ctx, func(ctx context.Context) error {
		res = &store.CountInstancesResult{ByStatus: map[store.Status]int64{}}
		rows, err := s.pool.Query(ctx, sql, customPlan(q.args)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var status string
			var n int64
			if err := rows.Scan(&status, &n); err != nil {
				return err
			}
			res.ByStatus[store.Status(status)] = n
			res.Total += n
		}
		return rows.Err()
	})
	return res, err
}

// byCounters reports whether the counters answer a count: no criterion but
// statuses.
func byCounters(f *store.InstanceFilter) bool {
	only := store.InstanceFilter{Statuses: f.Statuses}
	return f.InstanceIDs == nil && reflect.DeepEqual(*f, only)
}

// RecountInstances sets a tenant's status counters to the count of its
// instances, in one SERIALIZABLE transaction (which writes racing it make
// retry). The counters are exact as long as every write goes through this
// store; recount after loading rows by other means, or after a deploy whose
// migration ran while a version that did not maintain them was writing.
func (s *Store) RecountInstances(ctx context.Context, tenantID string) error {
	if tenantID == "" {
		return invalid("tenant id is required")
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM instance_counts WHERE tenant_id = $1`, tenantID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
INSERT INTO instance_counts (tenant_id, status, shard, n)
SELECT $1, status, 0, count(*) FROM instances WHERE tenant_id = $1 AND NOT deleting GROUP BY status`, tenantID)
		return err
	})
}

// ListExecutions lists an instance's stored executions, oldest first.
func (s *Store) ListExecutions(ctx context.Context, p *store.ListExecutionsParams) ([]store.Execution, error) {
	var execs []store.Execution
	var found bool
	err := s.retry(ctx, func(ctx context.Context) error {
		execs, found = nil, false
		rows, err := s.pool.Query(ctx, `
SELECT e.execution_id, e.status, e.input, e.output, COALESCE(e.error, ''), e.started_at, e.completed_at, e.event_count
FROM instances i
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND NOT e.deleting
WHERE i.tenant_id = $1 AND i.instance_id = $2 AND NOT i.deleting
ORDER BY e.execution_id`, p.TenantID, p.InstanceID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			found = true
			var id, startedAt, events *int64
			var status *string
			var completedAt *int64
			var ex store.Execution
			if err := rows.Scan(&id, &status, &ex.Input, &ex.Output, &ex.Error, &startedAt, &completedAt, &events); err != nil {
				return err
			}
			if id == nil {
				continue
			}
			ex.ExecutionID, ex.Status, ex.StartedAt = *id, store.Status(*status), fromMillis(*startedAt)
			ex.CompletedAt, ex.EventCount = fromNullMillis(completedAt), *events
			execs = append(execs, ex)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("instance %q: %w", p.InstanceID, store.ErrNotFound)
	}
	return execs, nil
}

// ListChildren lists the ids of an instance's direct children.
func (s *Store) ListChildren(ctx context.Context, p *store.ListChildrenParams) ([]string, error) {
	var ids []string
	err := s.retry(ctx, func(ctx context.Context) error {
		// In index order (creation), sorted here: sorting 10,000 ids in
		// Go takes a millisecond, in the database ten.
		rows, err := s.pool.Query(ctx, `SELECT instance_id FROM instances
			WHERE tenant_id = $1 AND parent_instance_id = $2 AND NOT deleting`,
			p.TenantID, p.InstanceID)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	slices.Sort(ids)
	return ids, err
}

// GetParentID returns the parent of an instance, empty for a root.
func (s *Store) GetParentID(ctx context.Context, p *store.GetParentIDParams) (string, error) {
	var parent string
	err := s.retry(ctx, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `SELECT COALESCE(parent_instance_id, '') FROM instances
			WHERE tenant_id = $1 AND instance_id = $2 AND NOT deleting`, p.TenantID, p.InstanceID).Scan(&parent)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("instance %q: %w", p.InstanceID, store.ErrNotFound)
	}
	return parent, err
}

// treeNode is an instance of a tree with what deleting it costs.
type treeNode struct {
	id, parent string
	depth      int
	running    bool
	deleting   bool
	rows       int64 // instance, executions, events, queue rows
}

// maxTreeDepth bounds the walk of a tree; deeper trees are refused.
const maxTreeDepth = 1000

// walkTree reads, for a delete, an instance and all its descendants,
// deepest first, so that children come before their parents, with what each
// costs to delete. It includes the instances an interrupted delete hid,
// which reads never show.
func walkTree(ctx context.Context, tx pgx.Tx, tenantID, rootID string) ([]treeNode, error) {
	rows, err := tx.Query(ctx, `
WITH RECURSIVE tree (instance_id, parent_instance_id, depth) AS (
	SELECT instance_id, COALESCE(parent_instance_id, ''), 0 FROM instances
	WHERE tenant_id = $1 AND instance_id = $2
	UNION ALL
	SELECT c.instance_id, c.parent_instance_id, t.depth + 1
	FROM tree t JOIN instances c ON c.tenant_id = $1 AND c.parent_instance_id = t.instance_id
	WHERE t.depth < $3
)
SELECT t.instance_id, t.parent_instance_id, t.depth, i.status = 'Running', i.deleting,
	1 + i.execution_count + i.event_count
	+ (SELECT count(*) FROM orchestrator_queue q WHERE q.tenant_id = $1 AND q.instance_id = t.instance_id)
	+ (SELECT count(*) FROM worker_queue w WHERE w.tenant_id = $1 AND w.instance_id = t.instance_id)
FROM tree t JOIN instances i ON i.tenant_id = $1 AND i.instance_id = t.instance_id
ORDER BY t.depth DESC, t.instance_id`, tenantID, rootID, maxTreeDepth+1)
	if err != nil {
		return nil, err
	}
	nodes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (treeNode, error) {
		var n treeNode
		err := r.Scan(&n.id, &n.parent, &n.depth, &n.running, &n.deleting, &n.rows)
		return n, err
	})
	if err != nil {
		return nil, err
	}
	if len(nodes) > 0 && nodes[0].depth > maxTreeDepth {
		return nil, invalid("instance tree deeper than %d", maxTreeDepth)
	}
	return nodes, nil
}

// GetInstanceTree returns an instance and its descendants, children first.
// It reads the whole tree the instance belongs to by its root (one index
// range, instances_root) and walks it here: a recursive query would probe
// the index once per instance, leaves included
// (docs/decisions/store-trees-by-root.md).
func (s *Store) GetInstanceTree(ctx context.Context, p *store.GetInstanceTreeParams) (*store.InstanceTree, error) {
	children := map[string][]string{}
	var found bool
	err := s.retry(ctx, func(ctx context.Context) error {
		clear(children)
		found = false
		rows, err := s.pool.Query(ctx, `
SELECT instance_id, COALESCE(parent_instance_id, '') FROM instances
WHERE tenant_id = $1 AND NOT deleting AND root_instance_id = (
	SELECT root_instance_id FROM instances WHERE tenant_id = $1 AND instance_id = $2 AND NOT deleting)`,
			p.TenantID, p.InstanceID)
		if err != nil {
			return err
		}
		var id, parent string
		_, err = pgx.ForEachRow(rows, []any{&id, &parent}, func() error {
			found = found || id == p.InstanceID
			children[parent] = append(children[parent], id)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("instance %q: %w", p.InstanceID, store.ErrNotFound)
	}
	// Level by level from the instance (an instance being deleted hides
	// its descendants, as it is absent), then deepest level first.
	var levels [][]string
	for level := []string{p.InstanceID}; len(level) > 0 && len(levels) <= maxTreeDepth; {
		levels = append(levels, level)
		var next []string
		for _, id := range level {
			next = append(next, children[id]...)
		}
		level = next
	}
	ids := make([]string, 0, len(children))
	for _, level := range slices.Backward(levels) {
		slices.Sort(level)
		ids = append(ids, level...)
	}
	return &store.InstanceTree{RootID: p.InstanceID, IDs: ids}, nil
}

// namedInstances names instances in an error message, in one style
// whatever their number: `instance "a"`, `instances "a", "b"`, and past
// five `instances "a", ..., "e" and 3 more`.
func namedInstances(ids []string) string {
	shown := ids[:min(len(ids), 5)]
	quoted := make([]string, len(shown))
	for i, id := range shown {
		quoted[i] = strconv.Quote(id)
	}
	s := strings.Join(quoted, ", ")
	if len(ids) > len(shown) {
		s += fmt.Sprintf(" and %d more", len(ids)-len(shown))
	}
	if len(ids) == 1 {
		return "instance " + s
	}
	return "instances " + s
}
