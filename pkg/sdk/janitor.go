package sdk

import (
	"context"
	"encoding/json"
	"iter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// RetentionPreview is what a retention policy would delete now.
type RetentionPreview struct {
	// Instances (descendants included), Executions and Events are the
	// totals, deletes and prunes together.
	Instances, Executions, Events int64
	// Groups break the deletes down by the roots' status and name.
	Groups []RetentionPreviewGroup
	// PrunedInstances, PrunedExecutions and PrunedEvents are the prunes of
	// continue-as-new chains.
	PrunedInstances, PrunedExecutions, PrunedEvents int64
	// OldestCompleted and NewestCompleted bound the completion times of the
	// roots that would go (zero when none).
	OldestCompleted, NewestCompleted time.Time
	// LowerBound is true when counting stopped at its cap: the figures are
	// then "at least".
	LowerBound  bool
	EvaluatedAt time.Time
}

// RetentionPreviewGroup is what would go of one status and name.
type RetentionPreviewGroup struct {
	Status                        Status
	Name                          string
	Instances, Executions, Events int64
}

func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// PreviewRetention tells what policy (the tenant's current one when nil)
// would delete if the janitor ran now; it deletes nothing.
func (t *TenantClient) PreviewRetention(ctx context.Context, policy *RetentionPolicy) (*RetentionPreview, error) {
	req := &orchardv1.PreviewRetentionRequest{}
	if policy != nil {
		req.Policy = policy.toProto()
	}
	resp, err := call(ctx, t.c, idempotent, t.tenants.PreviewRetention, req)
	if err != nil {
		return nil, err
	}
	p := resp.GetPreview()
	out := &RetentionPreview{
		Instances: p.GetInstances(), Executions: p.GetExecutions(), Events: p.GetEvents(),
		PrunedInstances: p.GetPrunedInstances(), PrunedExecutions: p.GetPrunedExecutions(), PrunedEvents: p.GetPrunedEvents(),
		OldestCompleted: timeOf(p.GetOldestCompletedAt()), NewestCompleted: timeOf(p.GetNewestCompletedAt()),
		LowerBound: p.GetLowerBound(), EvaluatedAt: timeOf(p.GetEvaluatedAt()),
	}
	for _, g := range p.GetGroups() {
		out.Groups = append(out.Groups, RetentionPreviewGroup{
			Status: statusFromProto(g.GetStatus()), Name: g.GetName(),
			Instances: g.GetInstances(), Executions: g.GetExecutions(), Events: g.GetEvents(),
		})
	}
	return out, nil
}

// AuditRecord says who deleted or pruned what, when, and how it ended.
type AuditRecord struct {
	TenantID, RecordID string
	// Actor is a token's subject, "janitor" or "platform-admin"; Role the
	// role it acted with.
	Actor, Role string
	// Action is delete_instance, delete_instances, prune_executions,
	// prune_executions_bulk, retention, graceful_delete or erase_tenant.
	Action string
	// Request is the call as JSON.
	Request json.RawMessage
	// What went; Rows counts an erasure's rows of every table.
	Instances, Executions, Events, Rows int64
	// Complete is false when work is left for another call or run.
	Complete bool
	// FinishedAt is zero for work that did not finish.
	StartedAt, FinishedAt time.Time
	Error                 string
}

// AuditFilter selects audit records; zero fields are unset.
type AuditFilter struct {
	Action                      string
	StartedAfter, StartedBefore time.Time
}

func (f AuditFilter) toProto(pageSize int) *orchardv1.ListAuditRecordsRequest {
	req := &orchardv1.ListAuditRecordsRequest{Action: f.Action, PageSize: int32(pageSize)}
	if !f.StartedAfter.IsZero() {
		req.StartedAfter = timestamppb.New(f.StartedAfter)
	}
	if !f.StartedBefore.IsZero() {
		req.StartedBefore = timestamppb.New(f.StartedBefore)
	}
	return req
}

func auditFromProto(r *orchardv1.AuditRecord) *AuditRecord {
	return &AuditRecord{
		TenantID: r.GetTenantId(), RecordID: r.GetRecordId(), Actor: r.GetActor(), Role: r.GetRole(), Action: r.GetAction(),
		Request: json.RawMessage(r.GetRequestJson()), Instances: r.GetInstances(), Executions: r.GetExecutions(),
		Events: r.GetEvents(), Rows: r.GetRows(), Complete: r.GetComplete(),
		StartedAt: timeOf(r.GetStartedAt()), FinishedAt: timeOf(r.GetFinishedAt()), Error: r.GetError(),
	}
}

// pages iterates over audit records, a page at a time.
func auditPages(list func(pageToken string) ([]*orchardv1.AuditRecord, string, error)) iter.Seq2[*AuditRecord, error] {
	return func(yield func(*AuditRecord, error) bool) {
		token := ""
		for {
			recs, next, err := list(token)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, r := range recs {
				if !yield(auditFromProto(r), nil) {
					return
				}
			}
			if next == "" {
				return
			}
			token = next
		}
	}
}

// AuditRecords iterates over the tenant's deletion audit log, newest
// first. A failure ends the iteration with its error as the last pair.
func (t *TenantClient) AuditRecords(ctx context.Context, f AuditFilter, opts ...ListOption) iter.Seq2[*AuditRecord, error] {
	l, err := listOpts(opts)
	if err != nil {
		return func(yield func(*AuditRecord, error) bool) { yield(nil, err) }
	}
	return auditPages(func(token string) ([]*orchardv1.AuditRecord, string, error) {
		req := f.toProto(l.pageSize)
		req.PageToken = token
		resp, err := call(ctx, t.c, idempotent, t.tenants.ListAuditRecords, req)
		return resp.GetRecords(), resp.GetNextPageToken(), err
	})
}

// AuditRecords iterates over the audit log of one tenant, or of every
// tenant when tenantID is empty, newest first.
func (a *AdminClient) AuditRecords(ctx context.Context, tenantID string, f AuditFilter, opts ...ListOption) iter.Seq2[*AuditRecord, error] {
	l, err := listOpts(opts)
	if err != nil {
		return func(yield func(*AuditRecord, error) bool) { yield(nil, err) }
	}
	return auditPages(func(token string) ([]*orchardv1.AuditRecord, string, error) {
		page := f.toProto(l.pageSize)
		page.PageToken = token
		resp, err := call(ctx, a.c, idempotent, a.admin.ListAuditRecords, &orchardv1.AdminServiceListAuditRecordsRequest{TenantId: tenantID, Page: page})
		return resp.GetRecords(), resp.GetNextPageToken(), err
	})
}

// EraseTenant erases a tenant for good: it is suspended at once, and the
// janitor deletes everything it has. It returns the tenant (DELETING) and
// the janitor's job id.
func (a *AdminClient) EraseTenant(ctx context.Context, id string) (*Tenant, int64, error) {
	resp, err := call(ctx, a.c, idempotent, a.admin.EraseTenant, &orchardv1.EraseTenantRequest{TenantId: id, ConfirmTenantId: id})
	if err != nil {
		return nil, 0, err
	}
	return tenantFromProto(resp.GetTenant()), resp.GetJobId(), nil
}

// TriggerRetention queues a retention run now for a tenant (every active
// tenant with a policy when empty). It returns the janitor's job ids and
// how many of them are new (a tenant's run already queued is not queued
// twice).
func (a *AdminClient) TriggerRetention(ctx context.Context, tenantID string) (jobIDs []int64, queued int64, err error) {
	resp, err := call(ctx, a.c, idempotent, a.admin.TriggerRetention, &orchardv1.TriggerRetentionRequest{TenantId: tenantID})
	if err != nil {
		return nil, 0, err
	}
	return resp.GetJobIds(), resp.GetRunsQueued(), nil
}

// JanitorRun is what one retention run did for one tenant.
type JanitorRun struct {
	RunID, TenantID                                    string
	StartedAt, FinishedAt                              time.Time
	InstancesDeleted, ExecutionsDeleted, EventsDeleted int64
	// Complete is false when the run's budget ran out and it went on in
	// another run.
	Complete, Triggered bool
	Error               string
}

// JanitorRuns iterates over recent retention runs, newest first, of one
// tenant or of all when tenantID is empty.
func (a *AdminClient) JanitorRuns(ctx context.Context, tenantID string, opts ...ListOption) iter.Seq2[*JanitorRun, error] {
	return func(yield func(*JanitorRun, error) bool) {
		l, err := listOpts(opts)
		if err != nil {
			yield(nil, err)
			return
		}
		req := &orchardv1.ListJanitorRunsRequest{TenantId: tenantID, PageSize: int32(l.pageSize)}
		for {
			resp, err := call(ctx, a.c, idempotent, a.admin.ListJanitorRuns, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, r := range resp.GetRuns() {
				if !yield(&JanitorRun{
					RunID: r.GetRunId(), TenantID: r.GetTenantId(), StartedAt: timeOf(r.GetStartedAt()), FinishedAt: timeOf(r.GetFinishedAt()),
					InstancesDeleted: r.GetInstancesDeleted(), ExecutionsDeleted: r.GetExecutionsDeleted(), EventsDeleted: r.GetEventsDeleted(),
					Complete: r.GetComplete(), Triggered: r.GetTriggered(), Error: r.GetError(),
				}, nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req = &orchardv1.ListJanitorRunsRequest{TenantId: tenantID, PageSize: int32(l.pageSize), PageToken: resp.GetNextPageToken()}
		}
	}
}

// Operation states.
const (
	OperationPending   = "pending"
	OperationRunning   = "running"
	OperationSucceeded = "succeeded"
	OperationFailed    = "failed"
)

// Operation is work the janitor does for the caller: a graceful delete.
type Operation struct {
	ID, Kind string
	// State is one of the Operation* states.
	State       string
	InstanceIDs []string
	// Counts say what was deleted, once succeeded; Error why it failed.
	Counts                         DeleteCounts
	Error                          string
	CreatedAt, UpdatedAt, Deadline time.Time
}

// Done reports whether the operation ended, either way.
func (o *Operation) Done() bool { return o.State == OperationSucceeded || o.State == OperationFailed }

var operationStates = map[orchardv1.OperationState]string{
	orchardv1.OperationState_OPERATION_STATE_PENDING:   OperationPending,
	orchardv1.OperationState_OPERATION_STATE_RUNNING:   OperationRunning,
	orchardv1.OperationState_OPERATION_STATE_SUCCEEDED: OperationSucceeded,
	orchardv1.OperationState_OPERATION_STATE_FAILED:    OperationFailed,
}

// DeleteGracefully cancels a root instance's tree, waits until it is
// terminal (up to timeout; 0: the server's default of 60 seconds), then
// deletes it: the janitor does it, and this returns the operation's id at
// once (poll it with Operation).
func (c *Client) DeleteGracefully(ctx context.Context, instanceID string, timeout time.Duration) (string, error) {
	req := &orchardv1.DeleteInstanceRequest{InstanceId: instanceID, Graceful: true}
	if timeout > 0 {
		req.GracefulTimeout = durationpb.New(timeout)
	}
	resp, err := call(ctx, c, notIdempotent, c.clients.DeleteInstance, req)
	if err != nil {
		return "", err
	}
	return resp.GetOperationId(), nil
}

// Operation reads an operation.
func (c *Client) Operation(ctx context.Context, id string) (*Operation, error) {
	resp, err := call(ctx, c, idempotent, c.clients.GetOperation, &orchardv1.GetOperationRequest{OperationId: id})
	if err != nil {
		return nil, err
	}
	o := resp.GetOperation()
	out := &Operation{
		ID: o.GetOperationId(), Kind: o.GetKind(), State: operationStates[o.GetState()], InstanceIDs: o.GetInstanceIds(),
		Error: o.GetError(), CreatedAt: timeOf(o.GetCreatedAt()), UpdatedAt: timeOf(o.GetUpdatedAt()), Deadline: timeOf(o.GetDeadline()),
	}
	if o.GetCounts() != nil {
		out.Counts.add(o.GetCounts())
	}
	return out, nil
}
