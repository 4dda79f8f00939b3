package crdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

var _ store.Janitor = (*Store)(nil)

var (
	sqlExpiryByPolicy      = stmt("ExpiryByPolicy")
	sqlExpiryByOverride    = stmt("ExpiryByOverride")
	sqlSummarizeTrees      = stmt("SummarizeTrees")
	sqlListChainCandidates = stmt("ListChainCandidates")
	sqlCountPrunable       = stmt("CountPrunable")
	sqlStartJanitorRun     = stmt("StartJanitorRun")
	sqlFinishJanitorRun    = stmt("FinishJanitorRun")
	sqlStartAudit          = stmt("StartAudit")
	sqlFinishAudit         = stmt("FinishAudit")
	sqlPruneAuditRecords   = stmt("PruneAuditRecords")
	sqlAddAuditTally       = stmt("AddAuditTally")
	sqlGetRootTally        = stmt("GetRootTally")
)

// ListExpiryCandidates reads terminal roots that completed before a cutoff.
func (s *Store) ListExpiryCandidates(ctx context.Context, p *store.ListExpiryCandidatesParams) ([]store.ExpiryCandidate, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	afterAt, afterID := int64(math.MinInt64), ""
	if p.After != nil {
		afterAt, afterID = p.After.CompletedAt.UnixMilli(), p.After.InstanceID
	}
	if !p.Status.Terminal() {
		return nil, invalid("expiry candidates need a terminal status, got %q", p.Status)
	}
	if len(p.Names) > store.MaxFilterIDs || len(p.ExcludeNames) > store.MaxFilterIDs {
		return nil, invalid("at most %d names to read or leave out", store.MaxFilterIDs)
	}
	sql, args := sqlExpiryByPolicy, namedArgs{"tenant_id": p.TenantID, "status": string(p.Status),
		"completed_before": p.CompletedBefore.UnixMilli(), "after_completed_at": afterAt, "after_id": afterID, "limit": limit}
	if p.Overrides {
		if p.Policy == nil {
			return nil, invalid("an override scan judges by a policy; none given")
		}
		sql = sqlExpiryByOverride
		if err := overrideArgs(args, p.Policy, p.Status, p.CompletedBefore); err != nil {
			return nil, err
		}
	} else {
		args["names"], args["exclude_names"] = nonNil(p.Names), nonNil(p.ExcludeNames)
	}
	var out []store.ExpiryCandidate
	err = s.retry(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sql, args)
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

// overrideArgs adds what ExpiryByOverride judges an instance by: the key
// of the status in a stored retention, and what the policy keeps of that
// status by name and by default, in nanoseconds, at now.
func overrideArgs(args namedArgs, policy *store.RetentionPolicy, st store.Status, now time.Time) error {
	args["now_ns"] = now.UnixNano()
	args["status_key"] = statusKeys[st]
	var def *int64
	if d, ok := policy.For("", nil).KeepFor(st); ok {
		ns := int64(d)
		def = &ns
	}
	keeps := map[string]int64{}
	for name := range policy.ByName {
		if d, ok := policy.For(name, nil).KeepFor(st); ok {
			keeps[name] = int64(d)
		}
	}
	ruleKeeps, err := json.Marshal(keeps)
	args["default_keep"], args["rule_keeps"] = def, ruleKeeps
	return err
}

// statusKeys are the keys of a stored retention's durations by status
// (store.Retention's JSON).
var statusKeys = map[store.Status]string{
	store.StatusCompleted: "completed", store.StatusFailed: "failed", store.StatusCancelled: "cancelled",
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
		rows, err := s.pool.Query(ctx, sqlSummarizeTrees, namedArgs{"tenant_id": p.TenantID, "root_ids": p.RootIDs})
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
		rows, err := s.pool.Query(ctx, sqlListChainCandidates, namedArgs{"tenant_id": p.TenantID, "after_id": p.AfterID, "limit": limit})
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
		return s.pool.QueryRow(ctx, sqlCountPrunable, namedArgs{"tenant_id": p.TenantID, "instance_ids": p.InstanceIDs,
			"keep_last": p.Options.KeepLast, "completed_before": before}).
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
		return s.pool.QueryRow(ctx, sqlStartJanitorRun, namedArgs{"tenant_id": p.TenantID, "now": now, "result": result}).Scan(&id)
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
		_, err := s.pool.Exec(ctx, sqlFinishJanitorRun, namedArgs{"tenant_id": r.TenantID, "run_id": r.RunID, "now": now, "result": result})
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
		_, err := s.pool.Exec(ctx, sqlStartAudit, namedArgs{"tenant_id": r.TenantID, "record_id": r.RecordID,
			"actor": r.Actor, "role": r.Role, "action": r.Action, "request": []byte(request), "started_at": r.StartedAt.UnixMilli()})
		return err
	})
}

// FinishAudit records how the work ended and folds the record's tallies
// into its result; FinishedAt set marks it finished.
func (s *Store) FinishAudit(ctx context.Context, p *store.FinishAuditParams) error {
	var finished *int64
	if !p.FinishedAt.IsZero() {
		f := p.FinishedAt.UnixMilli()
		finished = &f
	}
	var errText *string
	if p.Error != "" {
		errText = &p.Error
	}
	return s.retry(ctx, func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, sqlFinishAudit, namedArgs{"tenant_id": p.TenantID, "record_id": p.RecordID,
			"finished_at": finished, "error": errText, "complete": p.Complete})
		return err
	})
}

// addTally counts what one transaction removed into the audit record it
// works under (none: nothing to do), in that transaction; root names the
// root a DeleteInstance deletes (nil otherwise).
func addTally(ctx context.Context, tx pgx.Tx, tenantID, recordID string, root *string, t store.AuditResult) error {
	if recordID == "" || t == (store.AuditResult{}) {
		return nil
	}
	_, err := tx.Exec(ctx, sqlAddAuditTally, namedArgs{"tenant_id": tenantID, "record_id": recordID, "root_instance_id": root,
		"instances": t.Instances, "executions": t.Executions, "events": t.Events, "rows": t.Rows})
	return err
}

// GetRootTally sums the tallies of one root's DeleteInstance under a
// record.
func (s *Store) GetRootTally(ctx context.Context, p *store.GetRootTallyParams) (*store.AuditResult, error) {
	if p.TenantID == "" || p.RecordID == "" || p.RootID == "" {
		return nil, invalid("a root's tally needs a tenant, a record and a root")
	}
	var r store.AuditResult
	var n int64
	err := s.retry(ctx, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, sqlGetRootTally, namedArgs{"tenant_id": p.TenantID, "record_id": p.RecordID, "root_instance_id": p.RootID}).
			Scan(&n, &r.Instances, &r.Executions, &r.Events)
	})
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("tally of root %q in audit record %q: %w", p.RootID, p.RecordID, store.ErrNotFound)
	}
	return &r, nil
}

// ListAuditRecords pages through audit records, newest first.
func (s *Store) ListAuditRecords(ctx context.Context, p *store.ListAuditRecordsParams) ([]store.AuditRecord, error) {
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	sql, args := auditRecordsQuery(p, limit)
	var out []store.AuditRecord
	err = s.retry(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sql, args)
		if err != nil {
			return err
		}
		var r store.AuditRecord
		var request, result []byte
		var started int64
		var finished *int64
		var tallied store.AuditResult
		_, err = pgx.ForEachRow(rows, []any{&r.TenantID, &r.RecordID, &r.Actor, &r.Role, &r.Action, &request, &result, &started, &finished, &r.Error,
			&tallied.Instances, &tallied.Executions, &tallied.Events, &tallied.Rows}, func() error {
			rec := r
			rec.Request = json.RawMessage(append([]byte(nil), request...))
			rec.Result = store.AuditResult{}
			if err := json.Unmarshal(result, &rec.Result); err != nil {
				return fmt.Errorf("audit record %s: stored result: %w", r.RecordID, err)
			}
			rec.Result.Instances += tallied.Instances
			rec.Result.Executions += tallied.Executions
			rec.Result.Events += tallied.Events
			rec.Result.Rows += tallied.Rows
			rec.StartedAt, rec.FinishedAt = fromMillis(started), fromNullMillis(finished)
			out = append(out, rec)
			return nil
		})
		return err
	})
	return out, err
}

// auditRecordsQuery builds the statement of a page of limit audit records,
// each with the sums of its tallies: what its unfinished work removed so
// far, which FinishAudit has not folded into its result yet. The page is
// chosen first, so the tallies read are those of its records alone (one
// per committed transaction of their unfinished work).
func auditRecordsQuery(p *store.ListAuditRecordsParams, limit int) (sql string, args namedArgs) {
	q := &query{}
	if p.TenantID != "" {
		q.where("tenant_id = %s", q.arg("tenant_id", p.TenantID))
	}
	if p.Action != "" {
		q.where("action = %s", q.arg("action", p.Action))
	}
	if p.StartedAfter != nil {
		q.where("started_at >= %s", q.arg("started_after", p.StartedAfter.UnixMilli()))
	}
	if p.StartedBefore != nil {
		q.where("started_at < %s", q.arg("started_before", p.StartedBefore.UnixMilli()))
	}
	if a := p.After; a != nil {
		if p.TenantID != "" {
			q.where("(started_at, record_id) < (%s, %s)",
				q.arg("after_started_at", a.StartedAt.UnixMilli()), q.arg("after_record_id", a.RecordID))
		} else {
			q.where("(started_at, tenant_id, record_id) < (%s, %s, %s)",
				q.arg("after_started_at", a.StartedAt.UnixMilli()), q.arg("after_tenant_id", a.TenantID), q.arg("after_record_id", a.RecordID))
		}
	}
	return fmt.Sprintf(`SELECT r.tenant_id, r.record_id, r.actor, r.role, r.action, r.request, r.result, r.started_at, r.finished_at,
	COALESCE(r.error, ''), t.instances, t.executions, t.events, t.rows
FROM (
	SELECT tenant_id, record_id, actor, role, action, request, result, started_at, finished_at, error
	FROM audit_records WHERE %s ORDER BY started_at DESC, tenant_id DESC, record_id DESC LIMIT %d
) r
CROSS JOIN LATERAL (
	SELECT COALESCE(sum(instances), 0)::INT8 AS instances, COALESCE(sum(executions), 0)::INT8 AS executions,
		COALESCE(sum(events), 0)::INT8 AS events, COALESCE(sum(rows), 0)::INT8 AS rows
	FROM audit_tallies WHERE tenant_id = r.tenant_id AND record_id = r.record_id
) t
ORDER BY r.started_at DESC, r.tenant_id DESC, r.record_id DESC`, q.whereSQL(), limit), q.args
}

// PruneAuditRecords deletes up to Limit records of every tenant that
// started before a time, with their tallies.
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
		return s.pool.QueryRow(ctx, sqlPruneAuditRecords, namedArgs{"started_before": p.StartedBefore.UnixMilli(),
			"limit": limit, "keep_actions": keep}).Scan(&n)
	})
	return n, err
}

var (
	sqlCreateOperation    = stmt("CreateOperation")
	sqlGetOperation       = stmt("GetOperation")
	sqlListOpenOperations = stmt("ListOpenOperations")
	sqlUpdateOperation    = stmt("UpdateOperation")
)

// scanOperation reads a row of GetOperation or ListOpenOperations.
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
		tag, err := s.pool.Exec(ctx, sqlCreateOperation, namedArgs{"tenant_id": op.TenantID, "operation_id": op.OperationID,
			"kind": op.Kind, "request": []byte(op.Request), "state": op.State, "now": now, "deadline": op.Deadline.UnixMilli()})
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
		op, err = scanOperation(s.pool.QueryRow(ctx, sqlGetOperation,
			namedArgs{"tenant_id": p.TenantID, "operation_id": p.OperationID}))
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
		rows, err := s.pool.Query(ctx, sqlListOpenOperations, namedArgs{"limit": limit})
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
		tag, err := s.pool.Exec(ctx, sqlUpdateOperation, namedArgs{"tenant_id": op.TenantID, "operation_id": op.OperationID,
			"state": op.State, "result": []byte(result), "error": errText, "now": now})
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("operation %q: %w", op.OperationID, store.ErrNotFound)
		}
		return err
	})
	op.UpdatedAt = fromMillis(now)
	return err
}

// tenantTables are the tables that hold a tenant's rows, with the
// statement that erases them (sql/erase.sql), in the order an erasure
// empties them: what refers to an instance before the instance, the
// tenant's row, then its audit records' tallies and its audit records
// last (all but the tombstone's). A test checks this list against the
// catalog.
var tenantTables = []struct{ name, sql string }{
	{"history", stmt("EraseHistory")},
	{"executions", stmt("EraseExecutions")},
	{"orchestrator_queue", stmt("EraseOrchestratorQueue")},
	{"worker_queue", stmt("EraseWorkerQueue")},
	{"instance_leases", stmt("EraseInstanceLeases")},
	{"instance_tags", stmt("EraseInstanceTags")},
	{"instance_prunable", stmt("EraseInstancePrunable")},
	{"instance_counts", stmt("EraseInstanceCounts")},
	{"instances", stmt("EraseInstances")},
	{"definitions", stmt("EraseDefinitions")},
	{"operations", stmt("EraseOperations")},
	{"janitor_runs", stmt("EraseJanitorRuns")},
	{"tenants", stmt("EraseTenant")},
	{"audit_tallies", stmt("EraseAuditTallies")},
	{"audit_records", stmt("EraseAuditRecords")},
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
// in tenantTables' order, each transaction within MaxRowsPerTransaction
// and counting its rows into the tombstone's record.
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
		for budget > 0 {
			n := min(budget, s.opts.MaxRowsPerTransaction)
			var deleted int64
			err := s.inTx(ctx, func(tx pgx.Tx) error {
				args := namedArgs{"tenant_id": p.TenantID, "limit": n}
				if t.name == "audit_records" || t.name == "audit_tallies" {
					args["keep_record_id"] = p.KeepRecordID
				}
				tag, err := tx.Exec(ctx, t.sql, args)
				if err != nil {
					return err
				}
				deleted = tag.RowsAffected()
				return addTally(ctx, tx, p.TenantID, p.KeepRecordID, nil, store.AuditResult{Rows: deleted})
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
