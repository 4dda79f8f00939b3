package janitor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/retention"
	"github.com/orchardhq/orchard/pkg/store"
)

// snooze is how long a job that ran out of budget waits before it goes on.
// None: it goes back to the end of the queue (River fetches by scheduled
// time), behind the jobs that were waiting while it worked.
const snooze = 0

// sweep queues a retention job for every active tenant with a policy, an
// erasure job for every tenant being erased, a job for every open
// operation, and prunes old audit records.
func (j *Janitor) sweep(ctx context.Context, job *river.Job[sweepArgs]) error {
	q := j.Queue()
	var queued, after = 0, ""
	for {
		page, err := j.cfg.Store.ListTenants(ctx, &store.ListTenantsParams{AfterTenantID: after, Limit: store.MaxListLimit})
		if err != nil {
			return err
		}
		for _, t := range page {
			switch {
			case t.State == store.TenantDeleting:
				_, err = q.EraseTenant(ctx, t.TenantID, 0)
			case t.State == store.TenantActive && !t.Retention.IsZero():
				_, _, err = q.insert(ctx, retentionArgs{TenantID: t.TenantID}, nil)
			default:
				continue
			}
			if err != nil {
				return err
			}
			queued++
		}
		if len(page) < store.MaxListLimit {
			break
		}
		after = page[len(page)-1].TenantID
	}
	ops, err := j.cfg.Store.ListOpenOperations(ctx, store.MaxListLimit)
	if err != nil {
		return err
	}
	for _, op := range ops {
		if err := q.RunOperation(ctx, op.TenantID, op.OperationID); err != nil {
			return err
		}
	}
	pruned, err := j.cfg.Store.PruneAuditRecords(ctx, &store.PruneAuditRecordsParams{
		StartedBefore: j.cfg.Clock.Now().Add(-j.cfg.AuditRetention), Limit: 10_000, KeepActions: []string{store.AuditEraseTenant},
	})
	if err != nil {
		return err
	}
	j.cfg.Logger.Debug("janitor sweep", "jobs", queued, "operations", len(ops), "audit_records_pruned", pruned)
	return nil
}

// retention applies one tenant's policy within the job's budget, and
// snoozes while work is left. The run is recorded in janitor_runs (one row
// per attempt) and in the tenant's audit log (one record per job, which a
// retried job finishes).
func (j *Janitor) retention(ctx context.Context, job *river.Job[retentionArgs]) (err error) {
	tenantID := job.Args.TenantID
	ctx, span := j.tracer.Start(ctx, "janitor.retention", trace.WithAttributes(
		attribute.String("orchard.tenant", tenantID), attribute.Int64("river.job_id", job.ID), attribute.Int("river.attempt", job.Attempt)))
	defer func() { endSpan(span, err) }()
	t, err := j.cfg.Store.GetTenant(ctx, &store.GetTenantParams{TenantID: tenantID})
	if errors.Is(err, store.ErrNotFound) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if t.State != store.TenantActive {
		// Suspended tenants keep everything; erased ones are not swept.
		return nil
	}
	started := time.Now()
	defer func() { j.cfg.Metrics.runDone(ctx, time.Since(started)) }()
	audit := &store.AuditRecord{
		TenantID: tenantID, RecordID: "retention-" + strconv.FormatInt(job.ID, 10),
		Actor: store.ActorJanitor, Role: store.ActorJanitor, Action: store.AuditRetention,
		Request: mustJSON(map[string]any{"policy": t.Retention, "triggered": job.Args.Triggered}),
	}
	if err := j.cfg.Store.StartAudit(ctx, audit); err != nil {
		return err
	}
	runID, err := j.cfg.Store.StartJanitorRun(ctx, &store.StartJanitorRunParams{TenantID: tenantID, Triggered: job.Args.Triggered})
	if err != nil {
		return err
	}
	run := &store.JanitorRun{TenantID: tenantID, RunID: runID, Triggered: job.Args.Triggered}
	// Each batch counts what it deleted into the audit record in its own
	// transaction, so a job cut short at any point leaves a record that
	// counts exactly what went and says it did not finish.
	res, err := retention.Apply(ctx, j.cfg.Store, tenantID, t.Retention, retention.Options{
		Now: j.cfg.Clock.Now(), PageSize: j.cfg.PageSize, Deadline: started.Add(j.cfg.JobBudget), Pacer: j.pacer,
		Audit: audit.RecordID,
		OnBatch: func(b retention.Result) {
			j.cfg.Metrics.deleted(ctx, b)
			if j.pacer != nil {
				j.cfg.Metrics.duty(ctx, j.pacer.Duty())
			}
		},
	})
	run.InstancesDeleted, run.ExecutionsDeleted, run.EventsDeleted = res.Deleted.InstancesDeleted, res.Executions(), res.Events()
	run.Complete = err == nil && res.Complete
	if err != nil {
		run.Error = err.Error()
	}
	// Recorded even when the job's context ended: that is when it matters.
	bg := context.WithoutCancel(ctx)
	if ferr := j.cfg.Store.FinishJanitorRun(bg, run); ferr != nil && err == nil {
		err = ferr
	}
	finish := &store.FinishAuditParams{TenantID: tenantID, RecordID: audit.RecordID, Complete: run.Complete, Error: run.Error}
	if run.Complete {
		finish.FinishedAt = j.cfg.Clock.Now()
	}
	if ferr := j.cfg.Store.FinishAudit(bg, finish); ferr != nil && err == nil {
		err = ferr
	}
	j.sampleBacklog(ctx, t, run.Complete)
	span.SetAttributes(attribute.Int64("orchard.instances_deleted", run.InstancesDeleted),
		attribute.Int64("orchard.events_deleted", run.EventsDeleted), attribute.Bool("orchard.complete", run.Complete))
	if err != nil {
		return err
	}
	if !run.Complete {
		return river.JobSnooze(snooze)
	}
	return nil
}

// sampleBacklog records how much a tenant has expired but not yet deleted:
// nothing after a complete run, else a capped count.
func (j *Janitor) sampleBacklog(ctx context.Context, t *store.Tenant, complete bool) {
	if j.cfg.Metrics == nil {
		return
	}
	var backlog int64
	if !complete && ctx.Err() == nil {
		p, err := retention.PreviewPolicy(ctx, j.cfg.Store, t.TenantID, t.Retention, retention.PreviewOptions{
			Options:  retention.Options{Now: j.cfg.Clock.Now(), Deadline: time.Now().Add(2 * time.Second)},
			MaxRoots: 10_000,
		})
		if err != nil {
			return
		}
		backlog = p.Instances + p.PrunedExecutions
	}
	j.cfg.Metrics.backlog(t.TenantID, backlog)
}

// erase deletes every row of a tenant, a step at a time within the job's
// budget, then leaves one tombstone audit record saying what went.
func (j *Janitor) erase(ctx context.Context, job *river.Job[eraseArgs]) (err error) {
	tenantID := job.Args.TenantID
	ctx, span := j.tracer.Start(ctx, "janitor.erase", trace.WithAttributes(
		attribute.String("orchard.tenant", tenantID), attribute.Int64("river.job_id", job.ID)))
	defer func() { endSpan(span, err) }()
	t, err := j.cfg.Store.GetTenant(ctx, &store.GetTenantParams{TenantID: tenantID})
	switch {
	case errors.Is(err, store.ErrNotFound):
		// The tenant's row went in an earlier step: finish the rest.
	case err != nil:
		return err
	case t.State != store.TenantDeleting:
		// Resumed (or erased and created again) since: not this job's to erase.
		return river.JobCancel(fmt.Errorf("tenant %q is %s, not being erased", tenantID, t.State))
	}
	record := &store.AuditRecord{
		TenantID: tenantID, RecordID: "erasure-" + strconv.FormatInt(job.ID, 10),
		Actor: store.ActorPlatformAdmin, Role: store.ActorPlatformAdmin, Action: store.AuditEraseTenant,
		Request: mustJSON(map[string]any{"tenant_id": tenantID}),
	}
	if err := j.cfg.Store.StartAudit(ctx, record); err != nil {
		return err
	}
	deadline := time.Now().Add(j.cfg.JobBudget)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Each step's transactions count the rows they erase into the
		// tombstone record.
		sctx, cancel := retention.BatchContext(ctx)
		res, err := j.cfg.Store.EraseTenantRows(sctx, &store.EraseTenantRowsParams{
			TenantID: tenantID, MaxRows: j.cfg.EraseRowsPerStep, KeepRecordID: record.RecordID,
		})
		cancel()
		if res != nil {
			for table, n := range res.Rows {
				j.cfg.Metrics.erased(ctx, table, n)
			}
		}
		if err != nil {
			return err
		}
		if res.Done {
			err := j.cfg.Store.FinishAudit(context.WithoutCancel(ctx), &store.FinishAuditParams{TenantID: tenantID, RecordID: record.RecordID,
				Complete: true, FinishedAt: j.cfg.Clock.Now()})
			if err != nil {
				return err
			}
			j.cfg.Logger.Info("tenant erased", "tenant", tenantID)
			j.cfg.Metrics.backlog(tenantID, 0)
			return nil
		}
		if time.Now().After(deadline) {
			return river.JobSnooze(snooze)
		}
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain values are marshalled
	}
	return b
}

func endSpan(span trace.Span, err error) {
	var snoozed *river.JobSnoozeError
	if err != nil && !errors.As(err, &snoozed) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Metrics are the janitor's instruments.
type Metrics struct {
	deletedTotal metric.Int64Counter
	runSeconds   metric.Float64Histogram
	backlogGauge metric.Int64Gauge
	dutyGauge    metric.Float64Gauge
}

// NewMetrics creates the janitor's instruments on a meter provider.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	m := mp.Meter("github.com/orchardhq/orchard/services/janitor")
	var ms Metrics
	var err error
	if ms.deletedTotal, err = m.Int64Counter("orchard.janitor.deleted",
		metric.WithDescription("What the janitor deleted, by kind: instances, executions, events (deletes and prunes), rows (erasures).")); err != nil {
		return nil, err
	}
	if ms.runSeconds, err = m.Float64Histogram("orchard.janitor.run.duration", metric.WithUnit("s"),
		metric.WithDescription("Time one retention job worked before it finished or snoozed."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60)); err != nil {
		return nil, err
	}
	if ms.backlogGauge, err = m.Int64Gauge("orchard.janitor.backlog",
		metric.WithDescription("Instances and executions expired but not yet deleted, per tenant, sampled after each run (a lower bound past 10,000).")); err != nil {
		return nil, err
	}
	if ms.dutyGauge, err = m.Float64Gauge("orchard.janitor.duty",
		metric.WithDescription("Share of its time a retention worker spends deleting, as the pacer sets it after each batch (1: flat out).")); err != nil {
		return nil, err
	}
	return &ms, nil
}

func (m *Metrics) duty(ctx context.Context, d float64) {
	if m != nil {
		m.dutyGauge.Record(ctx, d)
	}
}

func (m *Metrics) deleted(ctx context.Context, r retention.Result) {
	if m == nil {
		return
	}
	for kind, n := range map[string]int64{"instances": r.Deleted.InstancesDeleted, "executions": r.Executions(), "events": r.Events()} {
		if n > 0 {
			m.deletedTotal.Add(ctx, n, metric.WithAttributes(attribute.String("kind", kind)))
		}
	}
}

func (m *Metrics) erased(ctx context.Context, table string, n int64) {
	if m == nil || n == 0 {
		return
	}
	m.deletedTotal.Add(ctx, n, metric.WithAttributes(attribute.String("kind", "rows"), attribute.String("table", table)))
}

func (m *Metrics) runDone(ctx context.Context, d time.Duration) {
	if m != nil {
		m.runSeconds.Record(ctx, d.Seconds())
	}
}

func (m *Metrics) backlog(tenantID string, n int64) {
	if m != nil {
		m.backlogGauge.Record(context.Background(), n, metric.WithAttributes(attribute.String("tenant", tenantID)))
	}
}

// GracefulDelete is the request of a graceful delete operation: cancel the
// running trees of these roots, wait until they are terminal, delete them.
type GracefulDelete struct {
	InstanceIDs []string `json:"instance_ids"`
	Reason      string   `json:"reason,omitempty"`
	// Actor and Role are who asked, for the audit record.
	Actor string `json:"actor"`
	Role  string `json:"role"`
}

// GracefulDeleteResult is what a graceful delete removed. The operation row
// holds it while the deletes run, one root at a time in the request's
// order, so that a job cut short and retried goes on from where it was.
// What a root's delete removed is read back from the audit record's tally
// of that root, which its transactions wrote as they committed: a job cut
// short between a root's delete and the update of this progress counts
// the root, when retried, as deleted with all it removed, not as skipped.
type GracefulDeleteResult struct {
	store.DeleteResult
	// Done is how many of the request's roots were deleted or skipped.
	Done int `json:"done"`
	// Skipped are the roots that were gone before the delete.
	Skipped []string `json:"skipped,omitempty"`
}

// operation runs one operation: a graceful delete cancels, then snoozes
// until the trees are terminal or the deadline passes, then deletes.
func (j *Janitor) operation(ctx context.Context, job *river.Job[operationArgs]) (err error) {
	ctx, span := j.tracer.Start(ctx, "janitor.operation", trace.WithAttributes(
		attribute.String("orchard.tenant", job.Args.TenantID), attribute.String("orchard.operation", job.Args.OperationID)))
	defer func() { endSpan(span, err) }()
	op, err := j.cfg.Store.GetOperation(ctx, &store.GetOperationParams{TenantID: job.Args.TenantID, OperationID: job.Args.OperationID})
	if errors.Is(err, store.ErrNotFound) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if op.State != store.OperationPending && op.State != store.OperationRunning {
		return nil
	}
	if op.Kind != store.OperationGracefulDelete {
		return j.failOperation(ctx, op, fmt.Errorf("unknown operation kind %q", op.Kind))
	}
	err = j.gracefulDelete(ctx, op)
	if errors.Is(err, store.ErrInvalidArgument) || errors.Is(err, store.ErrSubOrchestration) || errors.Is(err, store.ErrInstanceRunning) {
		// Retrying cannot change the answer: a request the store refuses, a
		// root that is not one, or one started again under the same id
		// since. Fail rather than retry, or widen what was asked.
		return j.failOperation(ctx, op, err)
	}
	return err
}

// gracefulDelete runs a graceful delete from where its operation row says
// it is: it snoozes (river.JobSnooze) until the trees are terminal.
func (j *Janitor) gracefulDelete(ctx context.Context, op *store.Operation) error {
	var req GracefulDelete
	if err := json.Unmarshal(op.Request, &req); err != nil {
		return j.failOperation(ctx, op, fmt.Errorf("operation request: %w", err))
	}
	tenantID := op.TenantID
	if op.State == store.OperationPending {
		for _, id := range req.InstanceIDs {
			if err := j.cancel(ctx, tenantID, id, req.Reason); err != nil {
				return err
			}
		}
		op.State = store.OperationRunning
		if err := j.cfg.Store.UpdateOperation(ctx, op); err != nil {
			return err
		}
	}
	trees, err := j.cfg.Store.SummarizeTrees(ctx, &store.SummarizeTreesParams{TenantID: tenantID, RootIDs: req.InstanceIDs})
	if err != nil {
		return err
	}
	for _, id := range req.InstanceIDs {
		if t, ok := trees[id]; ok && !t.Terminal {
			if j.cfg.Clock.Now().After(op.Deadline) {
				return j.failOperation(ctx, op, fmt.Errorf("instance %q still runs at the deadline: cancellation did not finish in time; nothing was deleted", id))
			}
			return river.JobSnooze(j.cfg.OperationPoll)
		}
	}
	audit := &store.AuditRecord{
		TenantID: tenantID, RecordID: operationRecordID(op), Actor: req.Actor, Role: req.Role,
		Action: store.AuditGracefulDelete, Request: op.Request,
	}
	if err := j.cfg.Store.StartAudit(ctx, audit); err != nil {
		return err
	}
	var res GracefulDeleteResult
	if len(op.Result) > 0 {
		if err := json.Unmarshal(op.Result, &res); err != nil {
			return j.failOperation(ctx, op, fmt.Errorf("operation progress: %w", err))
		}
	}
	for _, id := range req.InstanceIDs[min(res.Done, len(req.InstanceIDs)):] {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := j.deleteRoot(ctx, op, audit.RecordID, id, &res); err != nil {
			return err
		}
	}
	// The counts are in the record already, root by root.
	finish := &store.FinishAuditParams{TenantID: tenantID, RecordID: audit.RecordID, FinishedAt: j.cfg.Clock.Now(), Complete: true}
	if err := j.cfg.Store.FinishAudit(ctx, finish); err != nil {
		return err
	}
	op.State, op.Result = store.OperationSucceeded, mustJSON(res)
	return j.cfg.Store.UpdateOperation(ctx, op)
}

// deleteRoot deletes one root of a graceful delete under its audit record
// and records it in the operation's progress. They run under a batch
// context: a job stopped meanwhile lets them finish, and stops before the
// next root.
func (j *Janitor) deleteRoot(ctx context.Context, op *store.Operation, recordID, id string, res *GracefulDeleteResult) error {
	bctx, cancel := retention.BatchContext(ctx)
	defer cancel()
	r, err := j.cfg.Store.DeleteInstance(bctx, &store.DeleteInstanceParams{TenantID: op.TenantID, InstanceID: id, Audit: recordID})
	if err != nil {
		return err
	}
	// What this operation's deletes of the root removed, in this attempt
	// and in one that died before it recorded its progress: none at all
	// means the root was gone before.
	tally, err := j.cfg.Store.GetRootTally(bctx, &store.GetRootTallyParams{TenantID: op.TenantID, RecordID: recordID, RootID: id})
	switch {
	case errors.Is(err, store.ErrNotFound):
		res.Skipped = append(res.Skipped, id)
	case err != nil:
		return err
	default:
		res.Add(store.DeleteResult{InstancesDeleted: tally.Instances, ExecutionsDeleted: tally.Executions,
			EventsDeleted: tally.Events, QueueMessagesDeleted: r.QueueMessagesDeleted})
	}
	res.Done++
	op.Result = mustJSON(res)
	return j.cfg.Store.UpdateOperation(bctx, op)
}

// failOperation ends an operation that cannot succeed, and its audit record
// if its deletes had begun (the record keeps what they removed).
func (j *Janitor) failOperation(ctx context.Context, op *store.Operation, cause error) error {
	ctx = context.WithoutCancel(ctx)
	op.State, op.Error = store.OperationFailed, cause.Error()
	if err := j.cfg.Store.UpdateOperation(ctx, op); err != nil {
		return err
	}
	return j.cfg.Store.FinishAudit(ctx, &store.FinishAuditParams{TenantID: op.TenantID, RecordID: operationRecordID(op),
		FinishedAt: j.cfg.Clock.Now(), Error: op.Error})
}

func operationRecordID(op *store.Operation) string { return "operation-" + op.OperationID }

// cancel asks a running root to cancel (its tree follows); a terminal or
// missing one is left alone.
func (j *Janitor) cancel(ctx context.Context, tenantID, instanceID, reason string) error {
	in, err := j.cfg.Store.GetInstance(ctx, &store.GetInstanceParams{TenantID: tenantID, InstanceID: instanceID})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if in.Status.Terminal() {
		return nil
	}
	kind, body, err := engine.EncodeMessage(engine.CancelMessage{Reason: cmp.Or(reason, "deleted gracefully")})
	if err != nil {
		return err
	}
	_, err = j.cfg.Store.Enqueue(ctx, &store.EnqueueParams{TenantID: tenantID, InstanceID: instanceID, Message: store.Message{Kind: kind, Payload: body}})
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInstanceTerminal) {
		return nil
	}
	return err
}
