package api

import (
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orchardhq/orchard/pkg/store"
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

// statuses pairs each store status with its proto value: the one table both
// directions are built from.
var statuses = []struct {
	store store.Status
	proto orchardv1.InstanceStatus
}{
	{store.StatusRunning, orchardv1.InstanceStatus_INSTANCE_STATUS_RUNNING},
	{store.StatusCompleted, orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED},
	{store.StatusFailed, orchardv1.InstanceStatus_INSTANCE_STATUS_FAILED},
	{store.StatusCancelled, orchardv1.InstanceStatus_INSTANCE_STATUS_CANCELLED},
	{store.StatusContinuedAsNew, orchardv1.InstanceStatus_INSTANCE_STATUS_CONTINUED_AS_NEW},
}

var (
	statusToProto   = make(map[store.Status]orchardv1.InstanceStatus, len(statuses))
	statusFromProto = make(map[orchardv1.InstanceStatus]store.Status, len(statuses))
)

func init() {
	for _, s := range statuses {
		statusToProto[s.store] = s.proto
		statusFromProto[s.proto] = s.store
	}
}

// durationFrom reads an optional API duration: unset stays unset.
func durationFrom(d *durationpb.Duration) *time.Duration {
	if d == nil {
		return nil
	}
	v := d.AsDuration()
	return &v
}

// durationTo writes an optional duration.
func durationTo(d *time.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	return durationpb.New(*d)
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
		out.Retention = durationTo(in.Retention.Completed)
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
		InstancesPruned:    r.InstancesPruned,
		ExecutionsDeleted:  r.ExecutionsDeleted,
		EventsDeleted:      r.EventsDeleted,
	}
}

func pruneOptions(o *orchardv1.PruneOptions) store.PruneOptions {
	return store.PruneOptions{KeepLast: int(o.GetKeepLast()), CompletedBefore: boundFromTimestamp(o.GetCompletedBefore())}
}

// Retention policies are stored as given: a rule by name keeps its unset
// fields unset, and takes them from the default rule when it is applied
// (store.RetentionPolicy.For), so a later change of the default reaches it.

func ruleFromProto(r *orchardv1.RetentionRule) store.Retention {
	if r == nil {
		return store.Retention{}
	}
	out := store.Retention{
		Completed: durationFrom(r.Completed),
		Failed:    durationFrom(r.Failed),
		Cancelled: durationFrom(r.Cancelled),
	}
	if c := r.ContinueAsNew; c != nil {
		out.Chain.KeepLast = int(c.GetKeepLast())
		out.Chain.MaxAge = durationFrom(c.MaxAge)
		out.Chain.AutoPrune = c.AutoPrune
	}
	return out
}

func policyFromProto(p *orchardv1.RetentionPolicy) (store.RetentionPolicy, error) {
	out := store.RetentionPolicy{Default: ruleFromProto(p.GetDefaultRule())}
	if err := checkRule("policy.default_rule", out.For("", nil)); err != nil {
		return out, err
	}
	for name, r := range p.GetRulesByName() {
		if out.ByName == nil {
			out.ByName = map[string]store.Retention{}
		}
		out.ByName[name] = ruleFromProto(r)
	}
	for name := range out.ByName {
		if err := checkRule("policy.rules_by_name["+name+"]", out.For(name, nil)); err != nil {
			return out, err
		}
	}
	return out, nil
}

// checkRule checks a rule as it applies, merged with the rules it
// overrides.
func checkRule(path string, r store.Retention) error {
	if r.Chain.AutoPrune != nil && *r.Chain.AutoPrune && r.Chain.KeepLast == 0 {
		return fieldError(path+".continue_as_new.auto_prune", "auto_prune needs keep_last (in this rule or the default rule)")
	}
	return nil
}

func ruleToProto(r store.Retention) *orchardv1.RetentionRule {
	out := &orchardv1.RetentionRule{
		Completed: durationTo(r.Completed),
		Failed:    durationTo(r.Failed),
		Cancelled: durationTo(r.Cancelled),
	}
	if c := r.Chain; !c.IsZero() {
		out.ContinueAsNew = &orchardv1.ContinueAsNewRetention{MaxAge: durationTo(c.MaxAge), AutoPrune: c.AutoPrune}
		if c.KeepLast > 0 {
			k := int32(c.KeepLast)
			out.ContinueAsNew.KeepLast = &k
		}
	}
	return out
}

func policyToProto(p store.RetentionPolicy) *orchardv1.RetentionPolicy {
	out := &orchardv1.RetentionPolicy{}
	if !p.Default.IsZero() {
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

func limitsToProto(l store.Limits) *orchardv1.Limits {
	return &orchardv1.Limits{
		RequestsPerSecond:            l.RequestsPerSecond,
		Burst:                        int32(l.Burst),
		StartsPerSecond:              l.StartsPerSecond,
		StartsBurst:                  int32(l.StartsBurst),
		MaxRunningInstances:          l.MaxRunningInstances,
		MaxPayloadBytes:              l.MaxPayloadBytes,
		MaxHistoryEventsPerExecution: l.MaxHistoryEventsPerExecution,
		MaxValueBytes:                l.MaxValueBytes,
		MaxTurnStateBytes:            l.MaxTurnStateBytes,
		TurnBudgetMillis:             l.TurnBudgetMillis,
	}
}

// limitsFromProto validates limits.
func limitsFromProto(field string, l *orchardv1.Limits) (*store.Limits, error) {
	lim := &store.Limits{
		RequestsPerSecond:            l.GetRequestsPerSecond(),
		Burst:                        int(l.GetBurst()),
		StartsPerSecond:              l.GetStartsPerSecond(),
		StartsBurst:                  int(l.GetStartsBurst()),
		MaxRunningInstances:          l.GetMaxRunningInstances(),
		MaxPayloadBytes:              l.GetMaxPayloadBytes(),
		MaxHistoryEventsPerExecution: l.GetMaxHistoryEventsPerExecution(),
		MaxValueBytes:                l.GetMaxValueBytes(),
		MaxTurnStateBytes:            l.GetMaxTurnStateBytes(),
		TurnBudgetMillis:             l.GetTurnBudgetMillis(),
	}
	if err := lim.Validate(); err != nil {
		return nil, fieldError(field, "%v", err)
	}
	return lim, nil
}

var tenantStateToProto = map[string]orchardv1.TenantState{
	store.TenantActive:    orchardv1.TenantState_TENANT_STATE_ACTIVE,
	store.TenantSuspended: orchardv1.TenantState_TENANT_STATE_SUSPENDED,
	"deleting":            orchardv1.TenantState_TENANT_STATE_DELETING,
}

func tenantToProto(t *store.Tenant) *orchardv1.Tenant {
	return &orchardv1.Tenant{
		TenantId:        t.TenantID,
		State:           tenantStateToProto[t.State],
		Limits:          limitsToProto(t.Limits),
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
