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
	RETURNING 1
)
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
	RETURNING 1
)
SELECT count(*) FROM e`, tenantID, instanceID, executionID).Scan(&r.ExecutionsDeleted)
	return r, err
}

// PruneExecutionsBulk prunes the instances matching a filter, in instance
// id order, up to Limit instances.
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
	after := ""
	for int(res.InstancesProcessed) < limit {
		ids, err := s.pruneBulkCandidates(ctx, p.TenantID, &p.Filter, after, min(bulkPage, limit-int(res.InstancesProcessed)))
		if err != nil {
			return res, err
		}
		if len(ids) == 0 {
			res.Complete = true
			return res, nil
		}
		for _, id := range ids {
			r, err := s.PruneExecutions(ctx, &store.PruneExecutionsParams{TenantID: p.TenantID, InstanceID: id, Options: p.Options})
			if errors.Is(err, store.ErrNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return res, err
			}
			res.InstancesProcessed++
			res.ExecutionsDeleted += r.ExecutionsDeleted
			res.EventsDeleted += r.EventsDeleted
			after = id
		}
		after = ids[len(ids)-1]
	}
	more, err := s.pruneBulkCandidates(ctx, p.TenantID, &p.Filter, after, 1)
	if err != nil {
		return res, err
	}
	res.Complete = len(more) == 0
	return res, nil
}

// pruneBulkCandidates reads the next matching instances after the given id
// that have more than one execution stored (nothing else can be pruned).
func (s *Store) pruneBulkCandidates(ctx context.Context, tenantID string, f *store.InstanceFilter, after string, n int) ([]string, error) {
	return s.nextInstances(ctx, tenantID, f, false, after, n, "i.execution_count > 1")
}
