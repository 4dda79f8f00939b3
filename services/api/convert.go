package api

import (
	"encoding/json"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// boundFromTimestamp converts a time bound of a filter: nil when the field
// is absent, the time given otherwise (the zero time included: a bound that
// is there is applied as it is).
func boundFromTimestamp(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	return new(ts.AsTime())
}

var statusToProto = map[store.Status]orchardv1.InstanceStatus{
	store.StatusRunning:        orchardv1.InstanceStatus_INSTANCE_STATUS_RUNNING,
	store.StatusCompleted:      orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED,
	store.StatusFailed:         orchardv1.InstanceStatus_INSTANCE_STATUS_FAILED,
	store.StatusCancelled:      orchardv1.InstanceStatus_INSTANCE_STATUS_CANCELLED,
	store.StatusContinuedAsNew: orchardv1.InstanceStatus_INSTANCE_STATUS_CONTINUED_AS_NEW,
}

var statusFromProto = map[orchardv1.InstanceStatus]store.Status{}

func init() {
	for s, p := range statusToProto {
		statusFromProto[p] = s
	}
}

// retentionFromDuration maps an API retention (0 = remove at the janitor's
// next run) to the store's, where zero means "keep forever": 0 becomes one
// millisecond.
func retentionFromDuration(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return max(d.AsDuration(), time.Millisecond)
}

// retentionToDuration is retentionFromDuration's inverse: unset stays
// unset, one millisecond or less reads as 0.
func retentionToDuration(d time.Duration) *durationpb.Duration {
	switch {
	case d <= 0:
		return nil
	case d <= time.Millisecond:
		return durationpb.New(0)
	}
	return durationpb.New(d)
}

func instanceToProto(in *store.Instance) *orchardv1.Instance {
	out := &orchardv1.Instance{
		InstanceId:         in.InstanceID,
		Name:               in.Name,
		Version:            in.Version,
		Status:             statusToProto[in.Status],
		CurrentExecutionId: in.CurrentExecutionID,
		ParentInstanceId:   in.ParentInstanceID,
		RootInstanceId:     in.RootInstanceID,
		Input:              in.Input,
		Output:             in.Output,
		Error:              in.Error,
		Tags:               in.Tags,
		CreatedAt:          timestamp(in.CreatedAt),
		UpdatedAt:          timestamp(in.UpdatedAt),
		CompletedAt:        timestamp(in.CompletedAt),
		ExecutionCount:     in.ExecutionCount,
		EventCount:         in.EventCount,
	}
	if in.Retention != nil {
		out.Retention = retentionToDuration(in.Retention.Completed)
	}
	return out
}

func executionToProto(e *store.Execution) *orchardv1.Execution {
	return &orchardv1.Execution{
		ExecutionId: e.ExecutionID,
		Status:      statusToProto[e.Status],
		Input:       e.Input,
		Output:      e.Output,
		Error:       e.Error,
		StartedAt:   timestamp(e.StartedAt),
		CompletedAt: timestamp(e.CompletedAt),
		EventCount:  e.EventCount,
	}
}

// filterFromProto converts a validated filter (nil: everything).
func filterFromProto(f *orchardv1.InstanceFilter) store.InstanceFilter {
	if f == nil {
		return store.InstanceFilter{}
	}
	out := store.InstanceFilter{
		InstanceIDs:      f.GetInstanceIds(),
		Name:             f.GetName(),
		NamePrefix:       f.GetNamePrefix(),
		IDPrefix:         f.GetInstanceIdPrefix(),
		CreatedAfter:     boundFromTimestamp(f.GetCreatedAfter()),
		CreatedBefore:    boundFromTimestamp(f.GetCreatedBefore()),
		UpdatedAfter:     boundFromTimestamp(f.GetUpdatedAfter()),
		UpdatedBefore:    boundFromTimestamp(f.GetUpdatedBefore()),
		CompletedAfter:   boundFromTimestamp(f.GetCompletedAfter()),
		CompletedBefore:  boundFromTimestamp(f.GetCompletedBefore()),
		RootsOnly:        f.GetRootsOnly(),
		ParentInstanceID: f.GetParentInstanceId(),
	}
	if len(f.GetTags()) > 0 {
		out.Tags = f.GetTags()
	}
	if len(out.InstanceIDs) == 0 {
		out.InstanceIDs = nil
	}
	for _, s := range f.GetStatuses() {
		out.Statuses = append(out.Statuses, statusFromProto[s])
	}
	return out
}

var orderFromProto = map[orchardv1.InstanceOrder]store.Order{
	orchardv1.InstanceOrder_INSTANCE_ORDER_UNSPECIFIED:  store.OrderCreatedDesc,
	orchardv1.InstanceOrder_INSTANCE_ORDER_CREATED_DESC: store.OrderCreatedDesc,
	orchardv1.InstanceOrder_INSTANCE_ORDER_CREATED_ASC:  store.OrderCreatedAsc,
	orchardv1.InstanceOrder_INSTANCE_ORDER_UPDATED_DESC: store.OrderUpdatedDesc,
	orchardv1.InstanceOrder_INSTANCE_ORDER_UPDATED_ASC:  store.OrderUpdatedAsc,
}

func statusCounts(by map[store.Status]int64) *orchardv1.StatusCounts {
	return &orchardv1.StatusCounts{
		Running:        by[store.StatusRunning],
		Completed:      by[store.StatusCompleted],
		Failed:         by[store.StatusFailed],
		Cancelled:      by[store.StatusCancelled],
		ContinuedAsNew: by[store.StatusContinuedAsNew],
	}
}

func deleteCounts(r store.DeleteResult) *orchardv1.DeleteCounts {
	return &orchardv1.DeleteCounts{
		InstancesDeleted:     r.InstancesDeleted,
		ExecutionsDeleted:    r.ExecutionsDeleted,
		EventsDeleted:        r.EventsDeleted,
		QueueMessagesDeleted: r.QueueMessagesDeleted,
	}
}

func pruneCounts(r store.PruneResult) *orchardv1.PruneCounts {
	return &orchardv1.PruneCounts{
		InstancesProcessed: r.InstancesProcessed,
		ExecutionsDeleted:  r.ExecutionsDeleted,
		EventsDeleted:      r.EventsDeleted,
	}
}

func pruneOptions(o *orchardv1.PruneOptions) store.PruneOptions {
	return store.PruneOptions{KeepLast: int(o.GetKeepLast()), CompletedBefore: boundFromTimestamp(o.GetCompletedBefore())}
}

// Retention policies. The API's rules override field by field (an unset
// field keeps the default rule's value); the store applies the most
// specific rule as a whole. So a rule by name is stored merged with the
// default rule, and read back as stored.

func ruleFromProto(r *orchardv1.RetentionRule, base store.Retention) store.Retention {
	if r == nil {
		return base
	}
	out := base
	if r.Completed != nil {
		out.Completed = retentionFromDuration(r.Completed)
	}
	if r.Failed != nil {
		out.Failed = retentionFromDuration(r.Failed)
	}
	if r.Cancelled != nil {
		out.Cancelled = retentionFromDuration(r.Cancelled)
	}
	if c := r.ContinueAsNew; c != nil {
		if c.KeepLast != nil {
			out.Chain.KeepLast = int(c.GetKeepLast())
		}
		if c.MaxAge != nil {
			out.Chain.MaxAge = retentionFromDuration(c.MaxAge)
		}
		if c.AutoPrune != nil {
			out.Chain.AutoPrune = c.GetAutoPrune()
		}
	}
	return out
}

func policyFromProto(p *orchardv1.RetentionPolicy) (store.RetentionPolicy, error) {
	out := store.RetentionPolicy{Default: ruleFromProto(p.GetDefaultRule(), store.Retention{})}
	if err := checkRule("policy.default_rule", out.Default); err != nil {
		return out, err
	}
	for name, r := range p.GetRulesByName() {
		if out.ByName == nil {
			out.ByName = map[string]store.Retention{}
		}
		out.ByName[name] = ruleFromProto(r, out.Default)
		if err := checkRule("policy.rules_by_name["+name+"]", out.ByName[name]); err != nil {
			return out, err
		}
	}
	return out, nil
}

func checkRule(path string, r store.Retention) error {
	if r.Chain.AutoPrune && r.Chain.KeepLast == 0 {
		return fieldError(path+".continue_as_new.auto_prune", "auto_prune needs keep_last")
	}
	return nil
}

func ruleToProto(r store.Retention) *orchardv1.RetentionRule {
	out := &orchardv1.RetentionRule{
		Completed: retentionToDuration(r.Completed),
		Failed:    retentionToDuration(r.Failed),
		Cancelled: retentionToDuration(r.Cancelled),
	}
	if c := r.Chain; c != (store.ChainRetention{}) {
		out.ContinueAsNew = &orchardv1.ContinueAsNewRetention{MaxAge: retentionToDuration(c.MaxAge)}
		if c.KeepLast > 0 {
			k := int32(c.KeepLast)
			out.ContinueAsNew.KeepLast = &k
		}
		if c.AutoPrune {
			out.ContinueAsNew.AutoPrune = &c.AutoPrune
		}
	}
	return out
}

func policyToProto(p store.RetentionPolicy) *orchardv1.RetentionPolicy {
	out := &orchardv1.RetentionPolicy{}
	if p.Default != (store.Retention{}) {
		out.DefaultRule = ruleToProto(p.Default)
	}
	for name, r := range p.ByName {
		if out.RulesByName == nil {
			out.RulesByName = map[string]*orchardv1.RetentionRule{}
		}
		out.RulesByName[name] = ruleToProto(r)
	}
	return out
}

func limitsToProto(l tenancy.Limits) *orchardv1.Limits {
	return &orchardv1.Limits{
		RequestsPerSecond:            l.RequestsPerSecond,
		Burst:                        int32(l.Burst),
		MaxRunningInstances:          l.MaxRunningInstances,
		MaxPayloadBytes:              l.MaxPayloadBytes,
		MaxHistoryEventsPerExecution: l.MaxHistoryEventsPerExecution,
	}
}

// limitsFromProto validates limits and encodes them as the store keeps them.
func limitsFromProto(field string, l *orchardv1.Limits) (json.RawMessage, error) {
	lim := tenancy.Limits{
		RequestsPerSecond:            l.GetRequestsPerSecond(),
		Burst:                        int(l.GetBurst()),
		MaxRunningInstances:          l.GetMaxRunningInstances(),
		MaxPayloadBytes:              l.GetMaxPayloadBytes(),
		MaxHistoryEventsPerExecution: l.GetMaxHistoryEventsPerExecution(),
	}
	if err := lim.Validate(); err != nil {
		return nil, fieldError(field, "%v", err)
	}
	return json.Marshal(lim)
}

var tenantStateToProto = map[string]orchardv1.TenantState{
	store.TenantActive:    orchardv1.TenantState_TENANT_STATE_ACTIVE,
	store.TenantSuspended: orchardv1.TenantState_TENANT_STATE_SUSPENDED,
	"deleting":            orchardv1.TenantState_TENANT_STATE_DELETING,
}

func tenantToProto(t *store.Tenant) *orchardv1.Tenant {
	limits, _ := tenancy.ParseLimits(t.Limits)
	return &orchardv1.Tenant{
		TenantId:        t.TenantID,
		State:           tenantStateToProto[t.State],
		Limits:          limitsToProto(limits),
		RetentionPolicy: policyToProto(t.Retention),
		CreatedAt:       timestamp(t.CreatedAt),
		UpdatedAt:       timestamp(t.UpdatedAt),
	}
}

func usageToProto(u *store.TenantUsage) *orchardv1.Usage {
	return &orchardv1.Usage{
		Instances:      statusCounts(u.Instances),
		Executions:     u.Executions,
		Events:         u.Events,
		QueuedMessages: u.QueuedMessages,
		MeasuredAt:     timestamp(u.MeasuredAt),
	}
}
