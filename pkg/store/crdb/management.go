package crdb

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

var (
	sqlRecountClear     = stmt("RecountClear")
	sqlRecountInstances = stmt("RecountInstances")
	sqlListExecutions   = stmt("ListExecutions")
	sqlListChildren     = stmt("ListChildren")
	sqlGetParentID      = stmt("GetParentID")
	sqlWalkTree         = stmt("WalkTree")
	sqlGetInstanceTree  = stmt("GetInstanceTree")
)

// instanceColumns are the columns scanInstance reads, from instances i and
// the current execution e.
const instanceColumns = `i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count`

const joinCurrentExecution = `LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id`

// customPlan runs a statement built from a filter with its arguments
// bound before planning, so the plan fits the values: a prepared
// statement's generic plan, chosen once for every value, reads far more
// than a page for a selective range
// (docs/decisions/store-listings-plan-with-values.md). It goes by the
// simple protocol, the values quoted into the text by pgx: PostgreSQL
// plans such a query once, with them, whatever the session's
// plan_cache_mode (an unnamed prepared statement follows it, and the
// commands' pools force generic plans on PostgreSQL). Arguments must then have types pgx
// quotes from Go: strings, int64, []string.
func customPlan(args namedArgs) []any {
	return []any{pgx.QueryExecModeSimpleProtocol, args}
}

// ListInstances reads one page in keyset order: (order column, instance id).
func (s *Store) ListInstances(ctx context.Context, p *store.ListInstancesParams) (*store.ListInstancesResult, error) {
	limit := p.Limit
	switch {
	case limit == 0:
		limit = store.DefaultListLimit
	case limit < 0 || limit > store.MaxListLimit:
		return nil, invalid("limit must be between 1 and %d, got %d", store.MaxListLimit, limit)
	}
	sql, args, err := listInstancesQuery(p, limit)
	if err != nil {
		return nil, err
	}
	var page []store.Instance
	var keys []int64
	err = s.retry(ctx, func(ctx context.Context) error {
		page, keys = page[:0], keys[:0]
		rows, err := s.pool.Query(ctx, sql, customPlan(args)...)
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
		res.Next = &store.InstancePosition{OrderKey: keys[limit-1], InstanceID: page[limit-1].InstanceID}
	}
	return res, nil
}

// listInstancesQuery builds the statement of a page of limit instances
// (and one more, which says whether another page follows). It reads the
// page's keys first, from an index, then their rows and current
// executions: when the keys need sorting (a prefix scan), only the page is
// joined, not every match. In creation order, a tag filter reads the
// instances with its driving tag from instance_tags, in that order, and
// stops at the page.
func listInstancesQuery(p *store.ListInstancesParams, limit int) (sql string, args namedArgs, err error) {
	if p.TenantID == "" {
		return "", nil, invalid("tenant id is required")
	}
	if err := validateFilter(&p.Filter); err != nil {
		return "", nil, err
	}
	col, desc, err := orderColumn(p.Order)
	if err != nil {
		return "", nil, err
	}
	q := &query{}
	from, key := "instances i", "i"
	tagKey, tagValue, byTag := drivingTag(&p.Filter)
	if byTag && col == "created_at" {
		q.byTag = true
		from, key = "instance_tags g JOIN instances i ON i.tenant_id = g.tenant_id AND i.instance_id = g.instance_id", "g"
	}
	filterInstances(q, p.TenantID, &p.Filter, false)
	if q.byTag {
		q.where("g.tenant_id = %s AND g.tag_key = %s AND g.tag_value = %s", q.arg("tenant_id", p.TenantID), q.arg("tag_key", tagKey), q.arg("tag_value", tagValue))
	}
	dir, cmp := "ASC", ">"
	if desc {
		dir, cmp = "DESC", "<"
	}
	if a := p.After; a != nil {
		q.where("(%s.%s, %s.instance_id) %s (%s, %s)", key, col, key, cmp, q.arg("after_key", a.OrderKey), q.arg("after_id", a.InstanceID))
	}
	sql = `SELECT ` + instanceColumns + `, i.` + col + `
FROM (
	SELECT i.instance_id FROM ` + from + `
	WHERE ` + q.whereSQL() + `
	ORDER BY ` + key + `.` + col + ` ` + dir + `, ` + key + `.instance_id ` + dir + `
	LIMIT ` + strconv.Itoa(limit+1) + `
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
` + joinCurrentExecution + `
ORDER BY i.` + col + ` ` + dir + `, i.instance_id ` + dir
	return sql, q.args, nil
}

// countShards is how many rows of instance_counts hold a tenant's count of
// one status; writers add their deltas to one each, in turn.
const countShards = 16

// nextCountShard is the process's turn among the shards.
var nextCountShard atomic.Int64

// countShard picks the counter shard a write adds its delta to. A write
// holds its shard's row until it commits, and a commit waits for the WAL to
// reach the disk, so two writes on one shard commit one after the other.
// Taken in turn, the shards of the writes in flight differ as long as no
// more than countShards of them overlap; picked at random, two of five
// writes in flight would share one every other time.
func countShard() int64 { return nextCountShard.Add(1) % countShards }

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
	sql, args := countInstancesQuery(p)
	var res *store.CountInstancesResult
	err := s.retry(ctx, func(ctx context.Context) error {
		res = &store.CountInstancesResult{ByStatus: map[store.Status]int64{}}
		rows, err := s.pool.Query(ctx, sql, customPlan(args)...)
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

// countInstancesQuery builds the statement of a count: over the counters
// when they answer it, else over the matching instances.
func countInstancesQuery(p *store.CountInstancesParams) (sql string, args namedArgs) {
	q := &query{}
	if byCounters(&p.Filter) {
		q.where("tenant_id = %s", q.arg("tenant_id", p.TenantID))
		if len(p.Filter.Statuses) > 0 {
			q.where("status = ANY(%s::TEXT[])", q.arg("statuses", statusStrings(p.Filter.Statuses)))
		}
		return `SELECT status, sum(n)::INT8 FROM instance_counts
WHERE ` + q.whereSQL() + `
GROUP BY status HAVING sum(n) <> 0`, q.args
	}
	filterInstances(q, p.TenantID, &p.Filter, false)
	return `SELECT i.status, count(*) FROM instances i
WHERE ` + q.whereSQL() + `
GROUP BY i.status`, q.args
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
		tenant := namedArgs{"tenant_id": tenantID}
		if _, err := tx.Exec(ctx, sqlRecountClear, tenant); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sqlRecountInstances, tenant)
		return err
	})
}

// ListExecutions lists an instance's stored executions, oldest first.
func (s *Store) ListExecutions(ctx context.Context, p *store.ListExecutionsParams) ([]store.Execution, error) {
	var execs []store.Execution
	var found bool
	err := s.retry(ctx, func(ctx context.Context) error {
		execs, found = nil, false
		rows, err := s.pool.Query(ctx, sqlListExecutions, namedArgs{"tenant_id": p.TenantID, "instance_id": p.InstanceID})
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
		rows, err := s.pool.Query(ctx, sqlListChildren, namedArgs{"tenant_id": p.TenantID, "instance_id": p.InstanceID})
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
		return s.pool.QueryRow(ctx, sqlGetParentID, namedArgs{"tenant_id": p.TenantID, "instance_id": p.InstanceID}).Scan(&parent)
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
	rows, err := tx.Query(ctx, sqlWalkTree, namedArgs{"tenant_id": tenantID, "instance_id": rootID, "max_depth": maxTreeDepth + 1})
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

// GetInstanceTree returns an instance and its descendants, children first,
// from the whole tree it belongs to (sql/management.sql: GetInstanceTree).
func (s *Store) GetInstanceTree(ctx context.Context, p *store.GetInstanceTreeParams) (*store.InstanceTree, error) {
	children := map[string][]string{}
	var found bool
	err := s.retry(ctx, func(ctx context.Context) error {
		clear(children)
		found = false
		rows, err := s.pool.Query(ctx, sqlGetInstanceTree, namedArgs{"tenant_id": p.TenantID, "instance_id": p.InstanceID})
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
