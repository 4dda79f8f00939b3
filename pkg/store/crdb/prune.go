package crdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

func validatePrune(o *store.PruneOptions) error {
	if o.KeepLast < 0 {
		return invalid("keep_last must not be negative, got %d", o.KeepLast)
	}
	return nil
}

// pruneCandidates selects the executions of instance $2 that the options
// allow to prune: never the current one, never a running one, outside the
// newest KeepLast ($4; executions are numbered without gaps from the
// current one down, and pruning takes the oldest, so those are the ones
// numbered above current - KeepLast), completed strictly before $5.
const pruneCandidates = `
SELECT e.execution_id, e.event_count, e.deleting
FROM instances i
JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
WHERE i.tenant_id = $1 AND i.instance_id = $2 AND NOT i.deleting
	AND (e.deleting OR (
		e.execution_id <> i.current_execution_id AND e.status <> 'Running'
		AND ($4::INT8 = 0 OR e.execution_id <= i.current_execution_id - $4::INT8)
		AND ($5::INT8 = 0 OR e.completed_at < $5::INT8)))
ORDER BY e.deleting DESC, e.execution_id
LIMIT $3`

// unmarkPruned ends the statements that prune (tenant $1): the instances
// of the CTE counted (instance_id, execution_count after the prune) that
// have one execution left leave instance_prunable.
const unmarkPruned = `unmarked AS (
	DELETE FROM instance_prunable
	WHERE tenant_id = $1 AND instance_id IN (SELECT instance_id FROM counted WHERE execution_count <= 1)
	RETURNING 1
)`

// PruneExecutions deletes an instance's old executions in transactions of at
// most MaxRowsPerTransaction rows: whole executions while they fit; an
// execution too big for one transaction is hidden first (ListExecutions and
// GetHistory no longer see it) and removed piece by piece. Calling it again
// after an interruption finishes the job.
func (s *Store) PruneExecutions(ctx context.Context, p *store.PruneExecutionsParams) (*store.PruneResult, error) {
	if p.TenantID == "" || p.InstanceID == "" {
		return nil, invalid("tenant id and instance id are required")
	}
	if err := validatePrune(&p.Options); err != nil {
		return nil, err
	}
	total := store.PruneResult{InstancesProcessed: 1}
	for {
		var step store.PruneResult
		var done, found bool
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			step, done, found, err = s.pruneStep(ctx, tx, p.TenantID, p.InstanceID, &p.Options)
			return err
		})
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("instance %q: %w", p.InstanceID, store.ErrNotFound)
		}
		s.purged(step.ExecutionsDeleted + step.EventsDeleted)
		total.ExecutionsDeleted += step.ExecutionsDeleted
		total.EventsDeleted += step.EventsDeleted
		if done {
			return &total, nil
		}
	}
}

// pruneStep does one transaction's worth of pruning one instance.
func (s *Store) pruneStep(ctx context.Context, tx pgx.Tx, tenantID, instanceID string, o *store.PruneOptions) (r store.PruneResult, done, found bool, err error) {
	var before int64
	if !o.CompletedBefore.IsZero() {
		before = o.CompletedBefore.UnixMilli()
	}
	if err := tx.QueryRow(ctx, `SELECT true FROM instances WHERE tenant_id = $1 AND instance_id = $2 AND NOT deleting`,
		tenantID, instanceID).Scan(&found); errors.Is(err, pgx.ErrNoRows) {
		return r, true, false, nil
	} else if err != nil {
		return r, false, false, err
	}
	budget := s.opts.MaxRowsPerTransaction
	rows, err := tx.Query(ctx, pruneCandidates, tenantID, instanceID, budget+1, o.KeepLast, before)
	if err != nil {
		return r, false, true, err
	}
	type candidate struct {
		id, events int64
		deleting   bool
	}
	cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
		var c candidate
		return c, row.Scan(&c.id, &c.events, &c.deleting)
	})
	if err != nil || len(cands) == 0 {
		return r, true, true, err
	}
	var whole []int64
	var events int64
	for _, c := range cands {
		if c.deleting || 1+c.events > budget {
			break
		}
		whole = append(whole, c.id)
		events += c.events
		budget -= 1 + c.events
	}
	if len(whole) == 0 {
		// The first one is too big, or hidden by an interrupted prune.
		r, err = s.pruneExecutionPiece(ctx, tx, tenantID, instanceID, cands[0].id)
		return r, false, true, err
	}
	err = tx.QueryRow(ctx, `
WITH h AS (
	DELETE FROM history WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = ANY($3::INT8[]) RETURNING 1
), e AS (
	DELETE FROM executions WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = ANY($3::INT8[]) RETURNING 1
), counted AS (
	UPDATE instances SET execution_count = execution_count - (SELECT count(*) FROM e),
		event_count = event_count - (SELECT count(*) FROM h)
	WHERE tenant_id = $1 AND instance_id = $2
	RETURNING instance_id, execution_count
), `+unmarkPruned+`
SELECT (SELECT count(*) FROM e), (SELECT count(*) FROM h)`, tenantID, instanceID, whole).
		Scan(&r.ExecutionsDeleted, &r.EventsDeleted)
	return r, len(cands) == len(whole), true, err
}

// pruneExecutionPiece removes up to MaxRowsPerTransaction rows of one
// execution too big to prune at once, hiding it first.
func (s *Store) pruneExecutionPiece(ctx context.Context, tx pgx.Tx, tenantID, instanceID string, executionID int64) (store.PruneResult, error) {
	var r store.PruneResult
	err := tx.QueryRow(ctx, `
WITH hide AS (
	UPDATE executions SET deleting = true
	WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = $3 AND NOT deleting
	RETURNING event_count
), h AS (
	DELETE FROM history WHERE (tenant_id, instance_id, execution_id, event_id) IN (
		SELECT tenant_id, instance_id, execution_id, event_id FROM history
		WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = $3
		ORDER BY event_id LIMIT $4)
	RETURNING 1
), counted AS (
	UPDATE instances SET event_count = event_count - (SELECT count(*) FROM h)
	WHERE tenant_id = $1 AND instance_id = $2
	RETURNING 1
)
SELECT count(*) FROM h`, tenantID, instanceID, executionID, s.opts.MaxRowsPerTransaction-1).Scan(&r.EventsDeleted)
	if err != nil || r.EventsDeleted > 0 {
		return r, err
	}
	// No history left: the execution row goes too.
	err = tx.QueryRow(ctx, `
WITH e AS (
	DELETE FROM executions WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = $3 RETURNING 1
), counted AS (
	UPDATE instances SET execution_count = execution_count - (SELECT count(*) FROM e)
	WHERE tenant_id = $1 AND instance_id = $2
	RETURNING instance_id, execution_count
), `+unmarkPruned+`
SELECT count(*) FROM e`, tenantID, instanceID, executionID).Scan(&r.ExecutionsDeleted)
	return r, err
}

// PruneExecutionsBulk prunes the instances matching a filter, in (status,
// instance id) order, up to Limit instances.
func (s *Store) PruneExecutionsBulk(ctx context.Context, p *store.PruneExecutionsBulkParams) (*store.BulkPruneResult, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	if err := validateFilter(&p.Filter); err != nil {
		return nil, err
	}
	if err := validatePrune(&p.Options); err != nil {
		return nil, err
	}
	limit, err := bulkLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	res := &store.BulkPruneResult{}
	var after pruneKey
	for int(res.InstancesProcessed) < limit {
		// One more than the page: whether anything is left after it.
		want := min(bulkPage, limit-int(res.InstancesProcessed))
		keys, err := s.pruneBulkCandidates(ctx, p.TenantID, &p.Filter, after, want+1)
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
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = k.id
		}
		for len(ids) > 0 {
			// Many small instances per transaction; one too big for that
			// goes through PruneExecutions, in pieces.
			var step store.PruneResult
			var handled int
			var big string
			err := s.inTx(ctx, func(tx pgx.Tx) error {
				var err error
				step, handled, big, err = s.pruneInstancesStep(ctx, tx, p.TenantID, ids, &p.Options)
				return err
			})
			if err != nil {
				return res, err
			}
			s.purged(step.ExecutionsDeleted + step.EventsDeleted)
			res.InstancesProcessed += step.InstancesProcessed
			res.ExecutionsDeleted += step.ExecutionsDeleted
			res.EventsDeleted += step.EventsDeleted
			if big != "" {
				r, err := s.PruneExecutions(ctx, &store.PruneExecutionsParams{TenantID: p.TenantID, InstanceID: big, Options: p.Options})
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return res, err
				}
				if err == nil {
					res.InstancesProcessed++
					res.ExecutionsDeleted += r.ExecutionsDeleted
					res.EventsDeleted += r.EventsDeleted
				}
				handled++
			}
			ids = ids[handled:]
		}
		if !more {
			res.Complete = true
			return res, nil
		}
	}
	return res, nil
}

// pruneKey is a position in the order of bulk prune candidates: status,
// then instance id, the order of instance_prunable_status.
type pruneKey struct{ status, id string }

// pruneBulkCandidates reads the next matching instances after the given
// position that have more than one execution stored (nothing else can be
// pruned). They come from instance_prunable, which holds only those, by
// status: an instance pruned down to one execution leaves it, so a call
// does not wade through what earlier calls did, nor through the instances
// of other statuses than the filter's. Each is checked against the filter
// by its key (OFFSET 0 keeps the lookup apart, so that the candidates
// drive).
func (s *Store) pruneBulkCandidates(ctx context.Context, tenantID string, f *store.InstanceFilter, after pruneKey, n int) ([]pruneKey, error) {
	q := &query{}
	var where string
	switch len(f.Statuses) {
	case 1:
		// Equality: the index range is that status's, from the position on.
		where = fmt.Sprintf("p.tenant_id = %s AND p.status = %s AND p.instance_id > %s",
			q.arg(tenantID), q.arg(string(f.Statuses[0])), q.arg(after.id))
	default:
		where = fmt.Sprintf("p.tenant_id = %s AND (p.status, p.instance_id) > (%s, %s)",
			q.arg(tenantID), q.arg(after.status), q.arg(after.id))
		if len(f.Statuses) > 1 {
			where += fmt.Sprintf(" AND p.status = ANY(%s::TEXT[])", q.arg(statusStrings(f.Statuses)))
		}
	}
	filterInstances(q, tenantID, f, false)
	sql := fmt.Sprintf(`SELECT p.status, p.instance_id FROM instance_prunable p
CROSS JOIN LATERAL (SELECT 1 FROM instances i WHERE i.instance_id = p.instance_id AND %s OFFSET 0) m
WHERE %s
ORDER BY p.status, p.instance_id LIMIT %d`, q.whereSQL(), where, n)
	var keys []pruneKey
	err := s.retry(ctx, func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql, customPlan(q.args)...)
		if err != nil {
			return err
		}
		keys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (pruneKey, error) {
			var k pruneKey
			return k, r.Scan(&k.status, &k.id)
		})
		return err
	})
	return keys, err
}

// pruneInstancesStep prunes, in one transaction, the first instances of ids
// whose prunable executions fit in it whole. It reports how many instances
// it handled and, when it stopped at one that needs transactions of its own
// (too big, or left hidden by an interrupted prune), that instance, which
// then counts as the next one.
func (s *Store) pruneInstancesStep(ctx context.Context, tx pgx.Tx, tenantID string, ids []string, o *store.PruneOptions) (r store.PruneResult, handled int, big string, err error) {
	var before int64
	if !o.CompletedBefore.IsZero() {
		before = o.CompletedBefore.UnixMilli()
	}
	rows, err := tx.Query(ctx, `
SELECT e.instance_id, e.execution_id, e.event_count, e.deleting
FROM instances i
JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
WHERE i.tenant_id = $1 AND i.instance_id = ANY($2::TEXT[]) AND NOT i.deleting
	AND (e.deleting OR (
		e.execution_id <> i.current_execution_id AND e.status <> 'Running'
		AND ($3::INT8 = 0 OR e.execution_id <= i.current_execution_id - $3::INT8)
		AND ($4::INT8 = 0 OR e.completed_at < $4::INT8)))
ORDER BY e.instance_id, e.execution_id`, tenantID, ids, o.KeepLast, before)
	if err != nil {
		return r, 0, "", err
	}
	type candidate struct {
		execs  []int64
		cost   int64
		hidden bool
	}
	byInstance := map[string]*candidate{}
	for rows.Next() {
		var id string
		var exec, events int64
		var hidden bool
		if err := rows.Scan(&id, &exec, &events, &hidden); err != nil {
			rows.Close()
			return r, 0, "", err
		}
		c := byInstance[id]
		if c == nil {
			c = &candidate{}
			byInstance[id] = c
		}
		c.execs = append(c.execs, exec)
		c.cost += 1 + events
		c.hidden = c.hidden || hidden
	}
	if err := rows.Err(); err != nil {
		return r, 0, "", err
	}
	budget := s.opts.MaxRowsPerTransaction
	var delInst []string
	var delExec []int64
	for _, id := range ids {
		if c := byInstance[id]; c != nil {
			switch {
			case c.hidden || c.cost > s.opts.MaxRowsPerTransaction:
				if len(delInst) == 0 {
					return r, handled, id, nil
				}
				return s.finishPrune(ctx, tx, tenantID, delInst, delExec, r, handled)
			case c.cost > budget:
				return s.finishPrune(ctx, tx, tenantID, delInst, delExec, r, handled)
			}
			for _, e := range c.execs {
				delInst, delExec = append(delInst, id), append(delExec, e)
			}
			budget -= c.cost
		}
		handled++
		r.InstancesProcessed++
	}
	return s.finishPrune(ctx, tx, tenantID, delInst, delExec, r, handled)
}

// finishPrune deletes the chosen executions and their history and adjusts
// their instances' counters. Both key columns are bound with = ANY, so that
// the (generic) plan reads the history of the pruned executions only, not
// of every execution of the instances (half the rows read at 2
// executions per instance).
func (s *Store) finishPrune(ctx context.Context, tx pgx.Tx, tenantID string, inst []string, execs []int64, r store.PruneResult, handled int) (store.PruneResult, int, string, error) {
	if len(inst) == 0 {
		return r, handled, "", nil
	}
	err := tx.QueryRow(ctx, `
WITH d AS (
	SELECT * FROM unnest($2::TEXT[], $3::INT8[]) AS d (instance_id, execution_id)
), h AS (
	DELETE FROM history h
	WHERE h.tenant_id = $1 AND h.instance_id = ANY($2::TEXT[]) AND h.execution_id = ANY($3::INT8[])
		AND (h.instance_id, h.execution_id) IN (SELECT * FROM d)
	RETURNING h.instance_id
), e AS (
	DELETE FROM executions e
	WHERE e.tenant_id = $1 AND e.instance_id = ANY($2::TEXT[]) AND e.execution_id = ANY($3::INT8[])
		AND (e.instance_id, e.execution_id) IN (SELECT * FROM d)
	RETURNING e.instance_id
), counts AS (
	SELECT x.instance_id, sum(x.execs) AS execs, sum(x.events) AS events FROM (
		SELECT instance_id, 1 AS execs, 0 AS events FROM e
		UNION ALL
		SELECT instance_id, 0, 1 FROM h) x
	GROUP BY x.instance_id
), counted AS (
	UPDATE instances i SET execution_count = i.execution_count - c.execs, event_count = i.event_count - c.events
	FROM counts c
	WHERE i.tenant_id = $1 AND i.instance_id = ANY($2::TEXT[]) AND i.instance_id = c.instance_id
	RETURNING i.instance_id, i.execution_count
), `+unmarkPruned+`
SELECT (SELECT count(*) FROM e), (SELECT count(*) FROM h)`, tenantID, inst, execs).Scan(&r.ExecutionsDeleted, &r.EventsDeleted)
	return r, handled, "", err
}
