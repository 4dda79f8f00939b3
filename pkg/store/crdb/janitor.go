package crdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

var _ store.Janitor = (*Store)(nil)

// expiryByPolicy reads terminal roots of one status that follow the
// policy, from instances_expiry (its predicate is repeated so that both
// databases pick it).
const expiryByPolicy = `
SELECT instance_id, name, status, completed_at, NULL::JSONB FROM instances
WHERE tenant_id = $1 AND status = $2 AND completed_at IS NOT NULL AND parent_instance_id IS NULL AND retention IS NULL
	AND completed_at < $3 AND (completed_at, instance_id) > ($4, $5)
ORDER BY completed_at, instance_id LIMIT $6`

// expiryByOverride reads terminal roots with a retention of their own, of
// every status, from instances_expiry_override.
const expiryByOverride = `
SELECT instance_id, name, status, completed_at, retention FROM instances
WHERE tenant_id = $1 AND completed_at IS NOT NULL AND parent_instance_id IS NULL AND retention IS NOT NULL
	AND completed_at < $3 AND (completed_at, instance_id) > ($4, $5) AND $2::TEXT = ''
ORDER BY completed_at, instance_id LIMIT $6`

// ListExpiryCandidates reads terminal roots that completed before a cutoff.
func (s *Store) ListExpiryCandidates(ctx context.Context, p *store.ListExpiryCandidatesParams) ([]store.ExpiryCandidate, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	sql, status := expiryByPolicy, string(p.Status)
	if p.Overrides {
		sql, status = expiryByOverride, ""
	} else if !p.Status.Terminal() {
		return nil, invalid("expiry candidates need a terminal status, got %q", p.Status)
	}
	afterAt, afterID := int64(math.MinInt64), ""
	if p.After != nil {
		afterAt, afterID = p.After.CompletedAt.UnixMilli(), p.After.InstanceID
	}
	var out []store.ExpiryCandidate
	err = s.retry(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sql, p.TenantID, status, p.CompletedBefore.UnixMilli(), afterAt, afterID, limit)
		if err != nil {
			return err
		}
		var c store.ExpiryCandidate
		var completed int64
		var retention []byte
		_, err = pgx.ForEachRow(rows, []any{&c.InstanceID, &c.Name, &c.Status, &completed, &retention}, func() error {
			c.CompletedAt = fromMillis(completed)
			var err error
			if c.Retention, err = decodeRetention(c.InstanceID, retention); err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
		return err
	})
	return out, err
}

// decodeRetention reads an instance's stored retention; nil when it has
// none.
func decodeRetention(instanceID string, stored []byte) (*store.Retention, error) {
	if stored == nil {
		return nil, nil
	}
	var r store.Retention
	if err := json.Unmarshal(stored, &r); err != nil {
		return nil, fmt.Errorf("instance %q: stored retention: %w", instanceID, err)
	}
	return &r, nil
}

// SummarizeTrees counts what deleting each root's tree would remove.
func (s *Store) SummarizeTrees(ctx context.Context, p *store.SummarizeTreesParams) (map[string]store.TreeSummary, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	if len(p.RootIDs) > store.MaxFilterIDs {
		return nil, invalid("at most %d roots, got %d", store.MaxFilterIDs, len(p.RootIDs))
	}
	out := map[string]store.TreeSummary{}
	err := s.retry(ctx, func(ctx context.Context) error {
		clear(out)
		rows, err := s.pool.Query(ctx, `
SELECT root_instance_id, count(*), sum(execution_count)::INT8, sum(event_count)::INT8,
	bool_and(status IN ('Completed', 'Failed', 'Cancelled') OR deleting)
FROM instances WHERE tenant_id = $1 AND root_instance_id = ANY($2::TEXT[])
GROUP BY root_instance_id`, p.TenantID, p.RootIDs)
		if err != nil {
			return err
		}
		var root string
		var t store.TreeSummary
		_, err = pgx.ForEachRow(rows, []any{&root, &t.Instances, &t.Executions, &t.Events, &t.Terminal}, func() error {
			out[root] = t
			return nil
		})
		return err
	})
	return out, err
}

// ListChainCandidates reads instances with past executions, by id.
func (s *Store) ListChainCandidates(ctx context.Context, p *store.ListChainCandidatesParams) ([]store.ChainCandidate, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	var out []store.ChainCandidate
	err = s.retry(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `
SELECT p.instance_id, i.root_instance_id, i.name, i.retention
FROM instance_prunable p
JOIN instances i ON i.tenant_id = p.tenant_id AND i.instance_id = p.instance_id
WHERE p.tenant_id = $1 AND p.instance_id > $2 AND NOT i.deleting
ORDER BY p.instance_id LIMIT $3`, p.TenantID, p.AfterID, limit)
		if err != nil {
			return err
		}
		var c store.ChainCandidate
		var retention []byte
		_, err = pgx.ForEachRow(rows, []any{&c.InstanceID, &c.RootInstanceID, &c.Name, &retention}, func() error {
			var err error
			if c.Retention, err = decodeRetention(c.InstanceID, retention); err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
		return err
	})
	return out, err
}

// CountPrunable counts the executions a prune with these options would take.
func (s *Store) CountPrunable(ctx context.Context, p *store.CountPrunableParams) (store.PruneResult, error) {
	var r store.PruneResult
	if p.TenantID == "" {
		return r, invalid("tenant id is required")
	}
	if len(p.InstanceIDs) > store.MaxFilterIDs {
		return r, invalid("at most %d instances, got %d", store.MaxFilterIDs, len(p.InstanceIDs))
	}
	if err := validatePrune(&p.Options); err != nil {
		return r, err
	}
	before := millisOrNull(p.Options.CompletedBefore)
	err := s.retry(ctx, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `
SELECT count(DISTINCT i.instance_id), count(DISTINCT e.instance_id), count(e.execution_id), COALESCE(sum(e.event_count), 0)::INT8
FROM instances i
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND `+prunableExecution("i.current_execution_id", "$3", "$4")+`
WHERE i.tenant_id = $1 AND i.instance_id = ANY($2::TEXT[]) AND NOT i.deleting`, p.TenantID, p.InstanceIDs, p.Options.KeepLast, before).
			Scan(&r.InstancesProcessed, &r.InstancesPruned, &r.ExecutionsDeleted, &r.EventsDeleted)
	})
	return r, err
}

// StartJanitorRun records a run that begins and returns its id.
func (s *Store) StartJanitorRun(ctx context.Context, p *store.StartJanitorRunParams) (string, error) {
	result, err := json.Marshal(store.JanitorRun{Triggered: p.Triggered})
	if err != nil {
		return "", err
	}
	now := s.now()
	var id string
	err = s.retry(ctx, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `INSERT INTO janitor_runs (tenant_id, started_at, result) VALUES ($1, $2, $3)
			RETURNING run_id::TEXT`, p.TenantID, now, result).Scan(&id)
	})
	return id, err
}

// FinishJanitorRun records a run's outcome.
func (s *Store) FinishJanitorRun(ctx context.Context, r *store.JanitorRun) error {
	result, err := json.Marshal(r)
	if err != nil {
		return err
	}
	now := s.now()
	return s.retry(ctx, func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, `UPDATE janitor_runs SET finished_at = $3, result = $4
			WHERE tenant_id = $1 AND run_id = $2::UUID`, r.TenantID, r.RunID, now, result)
		return err
	})
}

// StartAudit writes a record before its work; a record of that id that a
// crashed attempt left is kept as it is.
func (s *Store) StartAudit(ctx context.Context, r *store.AuditRecord) error {
	if r.TenantID == "" || r.RecordID == "" || r.Action == "" {
		return invalid("an audit record needs a tenant, an id and an action")
	}
	request := r.Request
	if request == nil {
		request = json.RawMessage(`{}`)
	}
	if r.StartedAt.IsZero() {
		r.StartedAt = fromMillis(s.now())
	}
	return s.retry(ctx, func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, `INSERT INTO audit_records (tenant_id, record_id, actor, role, action, request, started_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tenant_id, record_id) DO NOTHING`,
			r.TenantID, r.RecordID, r.Actor, r.Role, r.Action, []byte(request), r.StartedAt.UnixMilli())
		return err
	})
}

// FinishAudit adds the record's counts to the stored ones and records
// whether the work is complete; FinishedAt set marks it finished.
func (s *Store) FinishAudit(ctx context.Context, r *store.AuditRecord) error {
	var finished *int64
	if !r.FinishedAt.IsZero() {
		f := r.FinishedAt.UnixMilli()
		finished = &f
	}
	var errText *string
	if r.Error != "" {
		errText = &r.Error
	}
	res := r.Result
	return s.retry(ctx, func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, `
UPDATE audit_records SET finished_at = $3, error = $4, result = jsonb_build_object(
	'instances', COALESCE((result->>'instances')::INT8, 0) + $5::INT8,
	'executions', COALESCE((result->>'executions')::INT8, 0) + $6::INT8,
	'events', COALESCE((result->>'events')::INT8, 0) + $7::INT8,
	'rows', COALESCE((result->>'rows')::INT8, 0) + $8::INT8,
	'complete', $9::BOOL)
WHERE tenant_id = $1 AND record_id = $2`,
			r.TenantID, r.RecordID, finished, errText, res.Instances, res.Executions, res.Events, res.Rows, res.Complete)
		return err
	})
}

// ListAuditRecords pages through audit records, newest first.
func (s *Store) ListAuditRecords(ctx context.Context, p *store.ListAuditRecordsParams) ([]store.AuditRecord, error) {
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	q := &query{}
	if p.TenantID != "" {
		q.where("tenant_id = %s", q.arg(p.TenantID))
	}
	if p.Action != "" {
		q.where("action = %s", q.arg(p.Action))
	}
	if p.StartedAfter != nil {
		q.where("started_at >= %s", q.arg(p.StartedAfter.UnixMilli()))
	}
	if p.StartedBefore != nil {
		q.where("started_at < %s", q.arg(p.StartedBefore.UnixMilli()))
	}
	if a := p.After; a != nil {
		if p.TenantID != "" {
			q.where("(started_at, record_id) < (%s, %s)", q.arg(a.StartedAt.UnixMilli()), q.arg(a.RecordID))
		} else {
			q.where("(started_at, tenant_id, record_id) < (%s, %s, %s)",
				q.arg(a.StartedAt.UnixMilli()), q.arg(a.TenantID), q.arg(a.RecordID))
		}
	}
	where := "true"
	if len(q.conds) > 0 {
		where = q.whereSQL()
	}
	sql := fmt.Sprintf(`SELECT tenant_id, record_id, actor, role, action, request, result, started_at, finished_at, COALESCE(error, '')
FROM audit_records WHERE %s ORDER BY started_at DESC, tenant_id DESC, record_id DESC LIMIT %d`, where, limit)
	var out []store.AuditRecord
	err = s.retry(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sql, q.args...)
		if err != nil {
			return err
		}
		var r store.AuditRecord
		var request, result []byte
		var started int64
		var finished *int64
		_, err = pgx.ForEachRow(rows, []any{&r.TenantID, &r.RecordID, &r.Actor, &r.Role, &r.Action, &request, &result, &started, &finished, &r.Error}, func() error {
			rec := r
			rec.Request = json.RawMessage(append([]byte(nil), request...))
			rec.Result = store.AuditResult{}
			if err := json.Unmarshal(result, &rec.Result); err != nil {
				return fmt.Errorf("audit record %s: stored result: %w", r.RecordID, err)
			}
			rec.StartedAt, rec.FinishedAt = fromMillis(started), fromNullMillis(finished)
			out = append(out, rec)
			return nil
		})
		return err
	})
	return out, err
}

// PruneAuditRecords deletes up to Limit records of every tenant that
// started before a time.
func (s *Store) PruneAuditRecords(ctx context.Context, p *store.PruneAuditRecordsParams) (int64, error) {
	limit, err := bulkLimit(p.Limit)
	if err != nil {
		return 0, err
	}
	keep := p.KeepActions
	if keep == nil {
		keep = []string{}
	}
	var n int64
	err = s.retry(ctx, func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, `
DELETE FROM audit_records WHERE (tenant_id, record_id) IN (
	SELECT tenant_id, record_id FROM audit_records
	WHERE started_at < $1 AND NOT action = ANY($3::TEXT[])
	ORDER BY started_at LIMIT $2)
	AND started_at < $1`, p.StartedBefore.UnixMilli(), limit, keep)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

const operationColumns = `tenant_id, operation_id, kind, request, state, result, COALESCE(error, ''), created_at, updated_at, deadline`

func scanOperation(row pgx.Row) (*store.Operation, error) {
	var op store.Operation
	var request, result []byte
	var created, updated, deadline int64
	if err := row.Scan(&op.TenantID, &op.OperationID, &op.Kind, &request, &op.State, &result, &op.Error, &created, &updated, &deadline); err != nil {
		return nil, err
	}
	op.Request, op.Result = request, result
	op.CreatedAt, op.UpdatedAt, op.Deadline = fromMillis(created), fromMillis(updated), fromMillis(deadline)
	return &op, nil
}

// CreateOperation records a pending operation.
func (s *Store) CreateOperation(ctx context.Context, op *store.Operation) error {
	if op.TenantID == "" || op.OperationID == "" || op.Kind == "" {
		return invalid("an operation needs a tenant, an id and a kind")
	}
	now := s.now()
	op.State = store.OperationPending
	op.CreatedAt, op.UpdatedAt = fromMillis(now), fromMillis(now)
	var inserted bool
	err := s.retry(ctx, func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, `INSERT INTO operations (tenant_id, operation_id, kind, request, state, created_at, updated_at, deadline)
			VALUES ($1, $2, $3, $4, $5, $6, $6, $7) ON CONFLICT (tenant_id, operation_id) DO NOTHING`,
			op.TenantID, op.OperationID, op.Kind, []byte(op.Request), op.State, now, op.Deadline.UnixMilli())
		inserted = tag.RowsAffected() == 1
		return err
	})
	if err == nil && !inserted {
		return fmt.Errorf("operation %q: %w", op.OperationID, store.ErrAlreadyExists)
	}
	return err
}

// GetOperation reads an operation.
func (s *Store) GetOperation(ctx context.Context, p *store.GetOperationParams) (*store.Operation, error) {
	var op *store.Operation
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		op, err = scanOperation(s.pool.QueryRow(ctx, `SELECT `+operationColumns+` FROM operations
			WHERE tenant_id = $1 AND operation_id = $2`, p.TenantID, p.OperationID))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("operation %q: %w", p.OperationID, store.ErrNotFound)
	}
	return op, err
}

// ListOpenOperations reads pending and running operations, oldest first.
func (s *Store) ListOpenOperations(ctx context.Context, limit int) ([]store.Operation, error) {
	limit, err := pageLimit(limit)
	if err != nil {
		return nil, err
	}
	var out []store.Operation
	err = s.retry(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT `+operationColumns+` FROM operations
			WHERE state IN ('pending', 'running') ORDER BY created_at LIMIT $1`, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			op, err := scanOperation(rows)
			if err != nil {
				return err
			}
			out = append(out, *op)
		}
		return rows.Err()
	})
	return out, err
}

// UpdateOperation records an operation's state, result and error.
func (s *Store) UpdateOperation(ctx context.Context, op *store.Operation) error {
	now := s.now()
	result := op.Result
	if result == nil {
		result = json.RawMessage(`{}`)
	}
	var errText *string
	if op.Error != "" {
		errText = &op.Error
	}
	err := s.retry(ctx, func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, `UPDATE operations SET state = $3, result = $4, error = $5, updated_at = $6
			WHERE tenant_id = $1 AND operation_id = $2`, op.TenantID, op.OperationID, op.State, []byte(result), errText, now)
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("operation %q: %w", op.OperationID, store.ErrNotFound)
		}
		return err
	})
	op.UpdatedAt = fromMillis(now)
	return err
}

// tenantTables are the tables that hold a tenant's rows, with their keys,
// in the order an erasure empties them: what refers to an instance before
// the instance, the tenant's row last but one, its audit records last (all
// but the tombstone). A test checks this list against the catalog.
var tenantTables = []struct{ name, key string }{
	{"history", "instance_id, execution_id, event_id"},
	{"executions", "instance_id, execution_id"},
	{"orchestrator_queue", "instance_id, id"},
	{"worker_queue", "id"},
	{"instance_locks", "instance_id"},
	{"instance_tags", "instance_id, tag_key"},
	{"instance_prunable", "instance_id"},
	{"instance_counts", "status, shard"},
	{"instances", "instance_id"},
	{"definitions", "name, version"},
	{"operations", "operation_id"},
	{"janitor_runs", "run_id"},
	{"tenants", "tenant_id"},
	{"audit_records", "record_id"},
}

// TenantTables lists the tables an erasure empties.
func TenantTables() []string {
	out := make([]string, len(tenantTables))
	for i, t := range tenantTables {
		out[i] = t.name
	}
	return out
}

// EraseTenantRows deletes up to MaxRows of a tenant's rows, table by table
// in tenantTables' order, each transaction within MaxRowsPerTransaction.
func (s *Store) EraseTenantRows(ctx context.Context, p *store.EraseTenantRowsParams) (*store.EraseResult, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	if p.MaxRows <= 0 {
		return nil, invalid("max rows must be positive, got %d", p.MaxRows)
	}
	res := &store.EraseResult{Rows: map[string]int64{}}
	budget := int64(p.MaxRows)
	for _, t := range tenantTables {
		keep := ""
		if t.name == "audit_records" {
			keep = " AND record_id <> $3"
		}
		sql := fmt.Sprintf(`DELETE FROM %[1]s WHERE tenant_id = $1 AND (%[2]s) IN (
	SELECT %[2]s FROM %[1]s WHERE tenant_id = $1%[3]s LIMIT $2)%[3]s`, t.name, t.key, keep)
		for budget > 0 {
			n := min(budget, s.opts.MaxRowsPerTransaction)
			var deleted int64
			err := s.inTx(ctx, func(tx pgx.Tx) error {
				args := []any{p.TenantID, n}
				if keep != "" {
					args = append(args, p.KeepRecordID)
				}
				tag, err := tx.Exec(ctx, sql, args...)
				deleted = tag.RowsAffected()
				return err
			})
			if err != nil {
				return res, fmt.Errorf("erase %s: %w", t.name, err)
			}
			s.purged(deleted)
			if deleted > 0 {
				res.Rows[t.name] += deleted
			}
			budget -= deleted
			if deleted < n {
				break // the table holds nothing more of the tenant
			}
		}
		if budget <= 0 {
			return res, nil
		}
	}
	res.Done = true
	return res, nil
}
