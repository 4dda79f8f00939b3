package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/orchardhq/orchard/pkg/retention"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// JanitorQueue is how the API hands work to the janitor (services/janitor's
// Queue): retention runs, erasures and graceful deletes.
type JanitorQueue interface {
	// TriggerRetention queues a tenant's retention run; duplicate when one
	// was queued already (jobID is that one's).
	TriggerRetention(ctx context.Context, tenantID string) (jobID int64, duplicate bool, err error)
	// EraseTenant queues a tenant's erasure, to start after a grace.
	EraseTenant(ctx context.Context, tenantID string, after time.Duration) (int64, error)
	// RunOperation queues an operation the store holds.
	RunOperation(ctx context.Context, tenantID, operationID string) error
}

// janitor is the queue the janitor's calls need; Unavailable when none is
// configured.
func (s *Server) janitor() (JanitorQueue, error) {
	if s.cfg.Janitor == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the janitor's queue is not configured on this server (ORCHARD_RIVER_DATABASE_URL)"))
	}
	return s.cfg.Janitor, nil
}

// queueError says that the janitor's queue could not take the work: the
// River database is unreachable. Nothing was queued.
func queueError(err error) error {
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the janitor's queue is unavailable: %w", err))
}

// actor is who a tenant's call acts as, for the audit log.
func actor(ctx context.Context) (subject, role string) {
	id, _ := tenancy.IdentityFrom(ctx)
	if id == nil {
		return "", ""
	}
	role = string(tenancy.RoleClient)
	if !id.Has(tenancy.RoleClient) && len(id.Roles) > 0 {
		role = string(id.Roles[0])
	}
	return id.Subject, role
}

// audited runs a delete or prune of the calling tenant under an audit
// record: written before the work (so a crash leaves one that says it did
// not finish), finished after it. work is given the record's id, which it
// passes to the store (the Audit params): each of the store's transactions
// counts what it removed into the record as it commits, so the counts are
// exact even when the process dies before the record is finished. work
// says whether the request is done (nothing left to call again for).
func (s *Server) audited(ctx context.Context, action string, req proto.Message, work func(record string) (complete bool, err error)) error {
	subject, role := actor(ctx)
	request, err := protojson.Marshal(req)
	if err != nil {
		return err
	}
	rec := &store.AuditRecord{
		TenantID: tenantOf(ctx).TenantID, RecordID: uuid.NewString(), Actor: subject, Role: role,
		Action: action, Request: request,
	}
	if err := s.store.StartAudit(ctx, rec); err != nil {
		return err
	}
	complete, werr := work(rec.RecordID)
	finish := &store.FinishAuditParams{TenantID: rec.TenantID, RecordID: rec.RecordID, Complete: complete, FinishedAt: time.Now()}
	if werr != nil {
		finish.Error = werr.Error()
	}
	// Recorded even when the caller went away: the work may have been done.
	if err := s.store.FinishAudit(context.WithoutCancel(ctx), finish); err != nil && werr == nil {
		return err
	}
	return werr
}

// defaultGracefulTimeout is how long a graceful delete waits by default.
const defaultGracefulTimeout = time.Minute

// startGracefulDelete records a graceful delete of roots and queues it for
// the janitor. The roots are checked first: a sub-orchestration is refused
// as a plain delete would refuse it.
func (c *clientService) startGracefulDelete(ctx context.Context, ids []string, timeout time.Duration) (string, error) {
	q, err := c.s.janitor()
	if err != nil {
		return "", err
	}
	t := tenantOf(ctx)
	for _, id := range ids {
		parent, err := c.s.store.GetParentID(ctx, &store.GetParentIDParams{TenantID: t.TenantID, InstanceID: id})
		if err != nil {
			return "", err
		}
		if parent != "" {
			return "", fmt.Errorf("instance %q is a child of %q: %w", id, parent, store.ErrSubOrchestration)
		}
	}
	subject, role := actor(ctx)
	request, err := json.Marshal(map[string]any{"instance_ids": ids, "actor": subject, "role": role})
	if err != nil {
		return "", err
	}
	op := &store.Operation{
		TenantID: t.TenantID, OperationID: uuid.NewString(), Kind: store.OperationGracefulDelete,
		Request: request, Deadline: time.Now().Add(timeout),
	}
	if err := c.s.store.CreateOperation(ctx, op); err != nil {
		return "", err
	}
	// The operation is recorded: if the queue is down, the janitor's sweep
	// queues it when it can.
	if err := q.RunOperation(ctx, t.TenantID, op.OperationID); err != nil {
		c.s.log.Warn("graceful delete recorded but not queued: the janitor's sweep will pick it up", "tenant", t.TenantID, "operation", op.OperationID, "error", err)
	}
	return op.OperationID, nil
}

var operationStateToProto = map[string]orchardv1.OperationState{
	store.OperationPending:   orchardv1.OperationState_OPERATION_STATE_PENDING,
	store.OperationRunning:   orchardv1.OperationState_OPERATION_STATE_RUNNING,
	store.OperationSucceeded: orchardv1.OperationState_OPERATION_STATE_SUCCEEDED,
	store.OperationFailed:    orchardv1.OperationState_OPERATION_STATE_FAILED,
}

func (c *clientService) GetOperation(ctx context.Context, req *connect.Request[orchardv1.GetOperationRequest]) (*connect.Response[orchardv1.GetOperationResponse], error) {
	op, err := c.s.store.GetOperation(ctx, &store.GetOperationParams{TenantID: tenantOf(ctx).TenantID, OperationID: req.Msg.OperationId})
	if err != nil {
		return nil, err
	}
	out := &orchardv1.Operation{
		OperationId: op.OperationID, Kind: op.Kind, State: operationStateToProto[op.State], Error: op.Error,
		CreatedAt: timestamp(op.CreatedAt), UpdatedAt: timestamp(op.UpdatedAt), Deadline: timestamp(op.Deadline),
	}
	var request struct {
		InstanceIDs []string `json:"instance_ids"`
	}
	if err := json.Unmarshal(op.Request, &request); err == nil {
		out.InstanceIds = request.InstanceIDs
	}
	if op.State == store.OperationSucceeded {
		var res store.DeleteResult
		if err := json.Unmarshal(op.Result, &res); err == nil {
			out.Counts = deleteCounts(res)
		}
	}
	return connect.NewResponse(&orchardv1.GetOperationResponse{Operation: out}), nil
}

func (t *tenantService) PreviewRetention(ctx context.Context, req *connect.Request[orchardv1.PreviewRetentionRequest]) (*connect.Response[orchardv1.PreviewRetentionResponse], error) {
	ten, err := t.fresh(ctx)
	if err != nil {
		return nil, err
	}
	policy := ten.Retention
	if req.Msg.Policy != nil {
		if policy, err = policyFromProto(req.Msg.Policy); err != nil {
			return nil, err
		}
	}
	now := time.Now()
	deadline := now.Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Add(-deadlineMargin).Before(deadline) {
		deadline = d.Add(-deadlineMargin)
	}
	p, err := retention.PreviewPolicy(ctx, t.s.store, ten.TenantID, policy, retention.PreviewOptions{
		Options: retention.Options{Now: now, Deadline: deadline},
	})
	if err != nil {
		return nil, err
	}
	out := &orchardv1.RetentionPreview{
		Instances: p.Instances, Executions: p.Executions, Events: p.Events,
		PrunedInstances: p.PrunedInstances, PrunedExecutions: p.PrunedExecutions, PrunedEvents: p.PrunedEvents,
		OldestCompletedAt: timestamp(p.OldestCompleted), NewestCompletedAt: timestamp(p.NewestCompleted),
		LowerBound: p.Truncated, EvaluatedAt: timestamp(now),
	}
	for _, g := range p.Groups {
		out.Groups = append(out.Groups, &orchardv1.RetentionPreviewGroup{
			Status: statusToProto[g.Status], Name: g.Name, Instances: g.Instances, Executions: g.Executions, Events: g.Events,
		})
	}
	return connect.NewResponse(&orchardv1.PreviewRetentionResponse{Preview: out}), nil
}

func (t *tenantService) ListAuditRecords(ctx context.Context, req *connect.Request[orchardv1.ListAuditRecordsRequest]) (*connect.Response[orchardv1.ListAuditRecordsResponse], error) {
	tenantID := tenantOf(ctx).TenantID
	records, next, err := t.s.listAudit(ctx, orchardv1connect.TenantServiceListAuditRecordsProcedure, tenantID, tenantID, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.ListAuditRecordsResponse{Records: records, NextPageToken: next}), nil
}

func (a *adminService) ListAuditRecords(ctx context.Context, req *connect.Request[orchardv1.AdminServiceListAuditRecordsRequest]) (*connect.Response[orchardv1.AdminServiceListAuditRecordsResponse], error) {
	page := req.Msg.Page
	if page == nil {
		page = &orchardv1.ListAuditRecordsRequest{}
	}
	records, next, err := a.s.listAudit(ctx, orchardv1connect.AdminServiceListAuditRecordsProcedure, "", req.Msg.TenantId, page)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.AdminServiceListAuditRecordsResponse{Records: records, NextPageToken: next}), nil
}

// listAudit reads a page of audit records of one tenant (or all, for a
// platform admin); bound is the tenant the page token is bound to.
func (s *Server) listAudit(ctx context.Context, procedure, bound, tenantID string, m *orchardv1.ListAuditRecordsRequest) ([]*orchardv1.AuditRecord, string, error) {
	query := queryDigest(&orchardv1.AdminServiceListAuditRecordsRequest{TenantId: tenantID, Page: &orchardv1.ListAuditRecordsRequest{
		Action: m.Action, StartedAfter: m.StartedAfter, StartedBefore: m.StartedBefore,
	}})
	size := pageSize(m.PageSize)
	p := &store.ListAuditRecordsParams{TenantID: tenantID, Action: m.Action, Limit: size}
	if m.StartedAfter != nil {
		at := m.StartedAfter.AsTime()
		p.StartedAfter = &at
	}
	if m.StartedBefore != nil {
		at := m.StartedBefore.AsTime()
		p.StartedBefore = &at
	}
	if m.PageToken != "" {
		tok, err := s.tokens.openPage(procedure, bound, m.PageToken, query)
		if err != nil {
			return nil, "", err
		}
		p.After = &store.AuditPosition{StartedAt: time.UnixMilli(tok.At), TenantID: tok.Key, RecordID: tok.ID}
	}
	recs, err := s.store.ListAuditRecords(ctx, p)
	if err != nil {
		return nil, "", err
	}
	out := make([]*orchardv1.AuditRecord, len(recs))
	for i, r := range recs {
		out[i] = &orchardv1.AuditRecord{
			TenantId: r.TenantID, RecordId: r.RecordID, Actor: r.Actor, Role: r.Role, Action: r.Action,
			RequestJson: string(r.Request), Instances: r.Result.Instances, Executions: r.Result.Executions,
			Events: r.Result.Events, Rows: r.Result.Rows, Complete: r.Result.Complete,
			StartedAt: timestamp(r.StartedAt), FinishedAt: timestamp(r.FinishedAt), Error: r.Error,
		}
	}
	next := ""
	if len(recs) == size {
		last := recs[size-1]
		if next, err = s.tokens.sealPage(procedure, bound, pageToken{Query: query, At: last.StartedAt.UnixMilli(), Key: last.TenantID, ID: last.RecordID}); err != nil {
			return nil, "", err
		}
	}
	return out, next, nil
}

// EraseGrace is how long an erasure waits after the suspension before it
// deletes: longer than the API servers' tenant cache and a dispatcher's
// lease, so nothing admitted before the suspension writes after it.
const EraseGrace = time.Minute

func (a *adminService) EraseTenant(ctx context.Context, req *connect.Request[orchardv1.EraseTenantRequest]) (*connect.Response[orchardv1.EraseTenantResponse], error) {
	q, err := a.s.janitor()
	if err != nil {
		return nil, err
	}
	deleting := store.TenantDeleting
	t, err := a.s.store.UpdateTenant(ctx, &store.UpdateTenantParams{TenantID: req.Msg.TenantId, State: &deleting})
	if err != nil {
		return nil, err
	}
	a.s.tenants.put(t)
	// The tenant is refused from now on; if the queue is down, the
	// janitor's sweep queues the erasure of every tenant being deleted.
	jobID, err := q.EraseTenant(ctx, t.TenantID, a.s.cfg.EraseGrace)
	if err != nil {
		return nil, queueError(err)
	}
	a.s.log.Info("tenant erasure queued", "tenant", t.TenantID, "job", jobID)
	return connect.NewResponse(&orchardv1.EraseTenantResponse{Tenant: tenantToProto(t), JobId: jobID}), nil
}

func (a *adminService) TriggerRetention(ctx context.Context, req *connect.Request[orchardv1.TriggerRetentionRequest]) (*connect.Response[orchardv1.TriggerRetentionResponse], error) {
	q, err := a.s.janitor()
	if err != nil {
		return nil, err
	}
	var tenants []string
	if id := req.Msg.TenantId; id != "" {
		t, err := a.s.store.GetTenant(ctx, &store.GetTenantParams{TenantID: id})
		if err != nil {
			return nil, err
		}
		if t.State != store.TenantActive {
			return nil, preconditionError(fmt.Errorf("tenant %q is %s: retention runs for active tenants only", id, t.State), "TENANT_NOT_ACTIVE")
		}
		tenants = []string{id}
	} else {
		after := ""
		for {
			page, err := a.s.store.ListTenants(ctx, &store.ListTenantsParams{AfterTenantID: after, Limit: store.MaxListLimit})
			if err != nil {
				return nil, err
			}
			for _, t := range page {
				if t.State == store.TenantActive && !t.Retention.IsZero() {
					tenants = append(tenants, t.TenantID)
				}
			}
			if len(page) < store.MaxListLimit {
				break
			}
			after = page[len(page)-1].TenantID
		}
	}
	resp := &orchardv1.TriggerRetentionResponse{}
	for _, id := range tenants {
		jobID, dup, err := q.TriggerRetention(ctx, id)
		if err != nil {
			return nil, queueError(err)
		}
		if !dup {
			resp.RunsQueued++
		}
		resp.JobIds = append(resp.JobIds, jobID)
	}
	return connect.NewResponse(resp), nil
}
