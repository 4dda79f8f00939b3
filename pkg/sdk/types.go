package sdk

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// Status is the status of an execution; an instance has the status of its
// current execution.
type Status string

// Statuses.
const (
	// StatusRunning: the execution has not finished.
	StatusRunning Status = "Running"
	// StatusCompleted: it finished with an output. Terminal.
	StatusCompleted Status = "Completed"
	// StatusFailed: it finished with an error. Terminal.
	StatusFailed Status = "Failed"
	// StatusCancelled: it was cancelled. Terminal.
	StatusCancelled Status = "Cancelled"
	// StatusContinuedAsNew: it ended by starting the instance's next
	// execution. Only past executions have it.
	StatusContinuedAsNew Status = "ContinuedAsNew"
)

// Terminal reports whether s is final: Completed, Failed or Cancelled.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// statuses pairs each Status with its proto value: the one table both
// directions are built from.
var statuses = []struct {
	status Status
	proto  orchardv1.InstanceStatus
}{
	{StatusRunning, orchardv1.InstanceStatus_INSTANCE_STATUS_RUNNING},
	{StatusCompleted, orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED},
	{StatusFailed, orchardv1.InstanceStatus_INSTANCE_STATUS_FAILED},
	{StatusCancelled, orchardv1.InstanceStatus_INSTANCE_STATUS_CANCELLED},
	{StatusContinuedAsNew, orchardv1.InstanceStatus_INSTANCE_STATUS_CONTINUED_AS_NEW},
}

var (
	statusToProto      = make(map[Status]orchardv1.InstanceStatus, len(statuses))
	statusFromProtoMap = make(map[orchardv1.InstanceStatus]Status, len(statuses))
)

func init() {
	for _, s := range statuses {
		statusToProto[s.status] = s.proto
		statusFromProtoMap[s.proto] = s.status
	}
}

// Statuses are every status, in lifecycle order.
func Statuses() []Status {
	out := make([]Status, len(statuses))
	for i, s := range statuses {
		out[i] = s.status
	}
	return out
}

// statusFromProto names a proto status; a value this SDK does not know (a
// newer server's) reads as Unknown(n) rather than as another status.
func statusFromProto(s orchardv1.InstanceStatus) Status {
	if st, ok := statusFromProtoMap[s]; ok {
		return st
	}
	return Status(fmt.Sprintf("Unknown(%d)", s))
}

// Instance is an orchestration instance with its current execution's state.
type Instance struct {
	// ID is unique within the tenant.
	ID string
	// Name and Version name the definition the instance runs (it stays
	// pinned to the version it started with).
	Name, Version string
	// Status is the current execution's.
	Status Status
	// CurrentExecutionID is 1 at start, one more at each continue-as-new.
	CurrentExecutionID int64
	// ParentID is the parent instance's id; empty for a root instance.
	ParentID string
	// RootID is the root of the instance's tree; its own id for a root.
	RootID string
	// Input is the current execution's input; Output its output once it
	// completed (JSON).
	Input, Output json.RawMessage
	// Error is the current execution's error, once it failed or was
	// cancelled.
	Error string
	// Tags are the tags given at start.
	Tags map[string]string
	// CreatedAt is when the instance started, UpdatedAt when it last
	// changed, CompletedAt when it reached a terminal status (zero while
	// running).
	CreatedAt, UpdatedAt, CompletedAt time.Time
	// ExecutionCount counts the executions not pruned; EventCount the
	// history events they hold.
	ExecutionCount, EventCount int64
	// Retention is the override given at start (how long the instance is
	// kept once terminal); nil when the tenant's policy applies.
	Retention *time.Duration
}

// DecodeOutput decodes the instance's output into v (json.Unmarshal).
func (in *Instance) DecodeOutput(v any) error {
	if len(in.Output) == 0 {
		return json.Unmarshal([]byte("null"), v)
	}
	return json.Unmarshal(in.Output, v)
}

// DecodeInput decodes the current execution's input into v.
func (in *Instance) DecodeInput(v any) error {
	if len(in.Input) == 0 {
		return json.Unmarshal([]byte("null"), v)
	}
	return json.Unmarshal(in.Input, v)
}

func instanceFromProto(p *orchardv1.Instance) *Instance {
	if p == nil {
		return nil
	}
	in := &Instance{
		ID:                 p.GetInstanceId(),
		Name:               p.GetName(),
		Version:            p.GetVersion(),
		Status:             statusFromProto(p.GetStatus()),
		CurrentExecutionID: p.GetCurrentExecutionId(),
		ParentID:           p.GetParentInstanceId(),
		RootID:             p.GetRootInstanceId(),
		Input:              rawJSON(p.GetInput()),
		Output:             rawJSON(p.GetOutput()),
		Error:              p.GetError(),
		Tags:               p.GetTags(),
		CreatedAt:          fromTimestamp(p.GetCreatedAt()),
		UpdatedAt:          fromTimestamp(p.GetUpdatedAt()),
		CompletedAt:        fromTimestamp(p.GetCompletedAt()),
		ExecutionCount:     p.GetExecutionCount(),
		EventCount:         p.GetEventCount(),
	}
	if r := p.GetRetention(); r != nil {
		d := r.AsDuration()
		in.Retention = &d
	}
	return in
}

// Execution is one execution of an instance: the first, or one started by
// continue-as-new.
type Execution struct {
	// ID is the execution's id within its instance: 1, 2, 3...
	ID     int64
	Status Status
	// Input and Output (JSON); a continued-as-new execution's output is
	// the next execution's input.
	Input, Output json.RawMessage
	Error         string
	// StartedAt, and CompletedAt (zero while running).
	StartedAt, CompletedAt time.Time
	EventCount             int64
}

func executionFromProto(p *orchardv1.Execution) *Execution {
	return &Execution{
		ID:          p.GetExecutionId(),
		Status:      statusFromProto(p.GetStatus()),
		Input:       rawJSON(p.GetInput()),
		Output:      rawJSON(p.GetOutput()),
		Error:       p.GetError(),
		StartedAt:   fromTimestamp(p.GetStartedAt()),
		CompletedAt: fromTimestamp(p.GetCompletedAt()),
		EventCount:  p.GetEventCount(),
	}
}

// HistoryEvent is one event of an execution's history.
type HistoryEvent struct {
	// ID is the event's id within its execution: 1, 2, 3... in order.
	ID int64
	// Kind says what happened ("ActivityScheduled", "TimerFired", ...).
	Kind string
	// Payload is the event's data (JSON).
	Payload   json.RawMessage
	CreatedAt time.Time
}

// History is the history of one execution.
type History struct {
	// ExecutionID is the execution the events belong to.
	ExecutionID int64
	// Events are in event id order.
	Events []*HistoryEvent
}

// Filter selects instances. Every criterion that is set is ANDed with the
// others; the zero Filter matches every instance. Time ranges are
// half-open: *After is inclusive, *Before strict.
type Filter struct {
	// InstanceIDs: only these instances (at most 1000).
	InstanceIDs []string
	// Statuses: only instances in one of these statuses.
	Statuses []Status
	// Name: only instances of this orchestration; NamePrefix: of a name
	// with this prefix; IDPrefix: whose id has this prefix.
	Name, NamePrefix, IDPrefix string
	// Creation, last change and completion time ranges: nil is unset; a
	// time that is set is applied as it is, the zero time included.
	CreatedAfter, CreatedBefore     *time.Time
	UpdatedAfter, UpdatedBefore     *time.Time
	CompletedAfter, CompletedBefore *time.Time
	// Tags: only instances carrying every one of these tags.
	Tags map[string]string
	// RootsOnly: only root instances (no parent).
	RootsOnly bool
	// ParentID: only the direct children of this instance.
	ParentID string
}

func (f *Filter) toProto(field string) (*orchardv1.InstanceFilter, error) {
	p := &orchardv1.InstanceFilter{
		InstanceIds:      f.InstanceIDs,
		Name:             f.Name,
		NamePrefix:       f.NamePrefix,
		InstanceIdPrefix: f.IDPrefix,
		CreatedAfter:     boundTimestamp(f.CreatedAfter),
		CreatedBefore:    boundTimestamp(f.CreatedBefore),
		UpdatedAfter:     boundTimestamp(f.UpdatedAfter),
		UpdatedBefore:    boundTimestamp(f.UpdatedBefore),
		CompletedAfter:   boundTimestamp(f.CompletedAfter),
		CompletedBefore:  boundTimestamp(f.CompletedBefore),
		Tags:             f.Tags,
		RootsOnly:        f.RootsOnly,
		ParentInstanceId: f.ParentID,
	}
	for i, s := range f.Statuses {
		ps, ok := statusToProto[s]
		if !ok {
			return nil, invalidArgument(fmt.Sprintf("%s.statuses[%d]", field, i), "unknown status %q", s)
		}
		p.Statuses = append(p.Statuses, ps)
	}
	return p, nil
}

// Order is the order of a listing; ties are broken by instance id.
type Order int

// Orders.
const (
	// NewestFirst: by creation time, newest first (the default).
	NewestFirst Order = iota
	// OldestFirst: by creation time, oldest first.
	OldestFirst
	// RecentlyUpdatedFirst: by last change, most recent first.
	RecentlyUpdatedFirst
	// LeastRecentlyUpdatedFirst: by last change, least recent first.
	LeastRecentlyUpdatedFirst
)

var orderToProto = map[Order]orchardv1.InstanceOrder{
	NewestFirst:               orchardv1.InstanceOrder_INSTANCE_ORDER_CREATED_DESC,
	OldestFirst:               orchardv1.InstanceOrder_INSTANCE_ORDER_CREATED_ASC,
	RecentlyUpdatedFirst:      orchardv1.InstanceOrder_INSTANCE_ORDER_UPDATED_DESC,
	LeastRecentlyUpdatedFirst: orchardv1.InstanceOrder_INSTANCE_ORDER_UPDATED_ASC,
}

// Counts counts instances, in total and by status.
type Counts struct {
	Total    int64
	ByStatus map[Status]int64
}

// DeleteCounts counts what a delete removed, descendants included.
type DeleteCounts struct {
	Instances, Executions, Events, QueueMessages int64
}

func (c *DeleteCounts) add(p *orchardv1.DeleteCounts) {
	c.Instances += p.GetInstancesDeleted()
	c.Executions += p.GetExecutionsDeleted()
	c.Events += p.GetEventsDeleted()
	c.QueueMessages += p.GetQueueMessagesDeleted()
}

// PruneOptions says which executions of an instance to delete: both
// criteria are ANDed, and at least one must be set. The current execution
// and running executions are never pruned.
type PruneOptions struct {
	// KeepLast keeps the newest KeepLast executions; 0: unset.
	KeepLast int
	// CompletedBefore prunes only executions that ended before it; nil:
	// unset.
	CompletedBefore *time.Time
}

func (o PruneOptions) toProto() (*orchardv1.PruneOptions, error) {
	if o.KeepLast < 0 || o.KeepLast > 100000 {
		return nil, invalidArgument("options.keep_last", "must be between 0 and 100000, not %d", o.KeepLast)
	}
	if o.KeepLast == 0 && o.CompletedBefore == nil {
		return nil, invalidArgument("options", "set KeepLast or CompletedBefore")
	}
	return &orchardv1.PruneOptions{KeepLast: int32(o.KeepLast), CompletedBefore: boundTimestamp(o.CompletedBefore)}, nil
}

// PruneCounts counts what a prune removed.
type PruneCounts struct {
	// InstancesProcessed counts the instances examined: for a bulk prune,
	// the matching instances with more than one execution stored (one with
	// a single execution has nothing to prune); for one instance, 1.
	InstancesProcessed int64
	// InstancesPruned counts the instances examined that lost at least one
	// execution.
	InstancesPruned    int64
	Executions, Events int64
}

func (c *PruneCounts) add(p *orchardv1.PruneCounts) {
	c.InstancesProcessed += p.GetInstancesProcessed()
	c.InstancesPruned += p.GetInstancesPruned()
	c.Executions += p.GetExecutionsDeleted()
	c.Events += p.GetEventsDeleted()
}

// Definition is a registered orchestration definition.
type Definition struct {
	Name, Version string
	// Document is the document as registered (YAML or JSON); empty in
	// listings.
	Document  []byte
	CreatedAt time.Time
}

func definitionFromProto(p *orchardv1.Definition) *Definition {
	return &Definition{Name: p.GetName(), Version: p.GetVersion(), Document: p.GetDocument(), CreatedAt: fromTimestamp(p.GetCreatedAt())}
}

// Registration tells what RegisterDefinition registered.
type Registration struct {
	// Name and Version are those the document declares.
	Name, Version string
	// Created is false when the same document was already registered.
	Created bool
}

// boundTimestamp converts a time bound: absent when nil, as given otherwise.
func boundTimestamp(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

func fromTimestamp(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func duration(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// rawJSON is a payload as the SDK hands it out: nil when empty.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

// encodeJSON encodes a value for a payload field: nil is empty (null for
// the server), a json.RawMessage passes as it is (when valid), anything
// else goes through json.Marshal.
func encodeJSON(field string, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if len(v) == 0 {
			return nil, nil
		}
		if !json.Valid(v) {
			return nil, invalidArgument(field, "not a JSON document")
		}
		return v, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		e := invalidArgument(field, "cannot encode as JSON: %v", err)
		e.cause = err
		return nil, e
	}
	return b, nil
}
