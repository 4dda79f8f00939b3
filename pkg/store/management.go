package store

import (
	"context"
	"time"
)

// Management is what tenants use to look after what they ran: list,
// inspect, walk trees, delete and prune (seeds 000 and 001). Everything is
// per tenant. Deletes and prunes run in retried SERIALIZABLE transactions,
// each touching a bounded number of rows: a big tree or chain goes in
// several transactions, leaves first, and an interrupted call leaves a state
// that calling it again finishes.
type Management interface {
	// ListInstances lists a page of instances matching a filter.
	ListInstances(ctx context.Context, p *ListInstancesParams) (*ListInstancesResult, error)
	// CountInstances counts the instances matching a filter, by status.
	CountInstances(ctx context.Context, p *CountInstancesParams) (*CountInstancesResult, error)
	// ListExecutions lists an instance's executions, oldest first.
	ListExecutions(ctx context.Context, p *ListExecutionsParams) ([]Execution, error)

	// ListChildren lists the ids of an instance's direct children.
	ListChildren(ctx context.Context, p *ListChildrenParams) ([]string, error)
	// GetParentID returns an instance's parent id, empty for a root.
	// ErrNotFound when the instance does not exist.
	GetParentID(ctx context.Context, p *GetParentIDParams) (string, error)
	// GetInstanceTree returns an instance and all its descendants,
	// children before parents. ErrNotFound when the instance does not exist.
	GetInstanceTree(ctx context.Context, p *GetInstanceTreeParams) (*InstanceTree, error)

	// DeleteInstancesAtomic deletes a set of instances in one transaction:
	// ErrWouldOrphan when a child of one is not in the set, and without
	// Force ErrInstanceRunning when one is running. Missing ids are ignored.
	DeleteInstancesAtomic(ctx context.Context, p *DeleteInstancesAtomicParams) (*DeleteResult, error)
	// DeleteInstance deletes a root instance with its whole tree:
	// ErrSubOrchestration for a child (always), ErrInstanceRunning without
	// Force when any instance of the tree runs. A missing instance deletes
	// nothing and is no error (InstancesDeleted = 0).
	DeleteInstance(ctx context.Context, p *DeleteInstanceParams) (*DeleteResult, error)
	// DeleteInstanceBulk deletes the root instances matching a filter whose
	// whole tree is terminal, each tree as a unit; running ones are skipped.
	DeleteInstanceBulk(ctx context.Context, p *DeleteInstanceBulkParams) (*BulkDeleteResult, error)
	// PruneExecutions deletes old executions of an instance: never the
	// current one, never a running one.
	PruneExecutions(ctx context.Context, p *PruneExecutionsParams) (*PruneResult, error)
	// PruneExecutionsBulk prunes the instances matching a filter.
	PruneExecutionsBulk(ctx context.Context, p *PruneExecutionsBulkParams) (*BulkPruneResult, error)
}

// InstanceFilter selects instances. Every criterion set is ANDed with the
// others; a zero field is unset, except the times, which are unset when nil
// and applied as given otherwise (the zero time included: a bound that is
// there must never widen into none). Time ranges are half-open: After is
// inclusive, Before is strict, both to the millisecond.
type InstanceFilter struct {
	// InstanceIDs restricts to these ids (at most 1000).
	InstanceIDs []string
	// Statuses: any of these.
	Statuses        []Status
	Name            string
	NamePrefix      string
	IDPrefix        string
	CreatedAfter    *time.Time
	CreatedBefore   *time.Time
	UpdatedAfter    *time.Time
	UpdatedBefore   *time.Time
	CompletedAfter  *time.Time
	CompletedBefore *time.Time
	// Tags: every one of these key/value pairs.
	Tags map[string]string
	// RootsOnly keeps instances that have no parent.
	RootsOnly bool
	// ParentInstanceID keeps the direct children of this instance.
	ParentInstanceID string
}

// Empty reports whether the filter has no criterion: it selects every
// instance.
func (f *InstanceFilter) Empty() bool {
	return f.InstanceIDs == nil && len(f.Statuses) == 0 && f.Name == "" && f.NamePrefix == "" && f.IDPrefix == "" &&
		f.CreatedAfter == nil && f.CreatedBefore == nil && f.UpdatedAfter == nil && f.UpdatedBefore == nil &&
		f.CompletedAfter == nil && f.CompletedBefore == nil && len(f.Tags) == 0 && !f.RootsOnly && f.ParentInstanceID == ""
}

// Order is the order of a listing.
type Order string

// The orders of a listing. Ties are broken by instance id, in the same
// direction.
const (
	OrderCreatedDesc Order = "created_desc"
	OrderCreatedAsc  Order = "created_asc"
	OrderUpdatedDesc Order = "updated_desc"
	OrderUpdatedAsc  Order = "updated_asc"
)

// Listing limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	MaxFilterIDs     = 1000
	DefaultBulkLimit = 1000
)

// ListInstancesParams asks for a page of a listing.
type ListInstancesParams struct {
	TenantID string
	Filter   InstanceFilter
	Order    Order // OrderCreatedDesc when empty
	Limit    int   // DefaultListLimit when 0; at most MaxListLimit
	// After continues a listing after this position: the Next of the
	// previous page, with the same filter and order (nil: from the start).
	// The store takes it as it comes; binding it to its tenant, filter
	// and order is the API's page token's work.
	After *InstancePosition
}

// InstancePosition is a place in a listing's keyset order: the value of
// the order column (created or updated time, in Unix milliseconds) of an
// instance, and its id.
type InstancePosition struct {
	OrderKey   int64
	InstanceID string
}

// ListInstancesResult is a page of a listing.
type ListInstancesResult struct {
	Instances []Instance
	// Next is the position after the page's last instance; nil on the last
	// page.
	Next *InstancePosition
}

// CountInstancesParams asks for counts.
type CountInstancesParams struct {
	TenantID string
	Filter   InstanceFilter
}

// CountInstancesResult holds counts by status.
type CountInstancesResult struct {
	Total    int64
	ByStatus map[Status]int64
}

// Execution is one execution of an instance.
type Execution struct {
	ExecutionID int64
	Status      Status
	Input       []byte
	Output      []byte
	Error       string
	StartedAt   time.Time
	CompletedAt time.Time // zero while running
	EventCount  int64
}

// ListExecutionsParams names an instance.
type ListExecutionsParams struct {
	TenantID   string
	InstanceID string
}

// ListChildrenParams names an instance.
type ListChildrenParams struct {
	TenantID   string
	InstanceID string
}

// GetParentIDParams names an instance.
type GetParentIDParams struct {
	TenantID   string
	InstanceID string
}

// GetInstanceTreeParams names an instance.
type GetInstanceTreeParams struct {
	TenantID   string
	InstanceID string
}

// InstanceTree is an instance and all its descendants.
type InstanceTree struct {
	RootID string
	// IDs holds every instance of the tree, children before parents: the
	// order in which they can be deleted.
	IDs []string
}

// DeleteInstancesAtomicParams names a set of instances.
type DeleteInstancesAtomicParams struct {
	TenantID    string
	InstanceIDs []string
	Force       bool
}

// DeleteInstanceParams names a root instance.
type DeleteInstanceParams struct {
	TenantID   string
	InstanceID string
	Force      bool
	// Audit, when set, names the audit record (written by StartAudit)
	// that each transaction of the call counts what it removed into, in
	// that same transaction: the record's counts are then exact whatever
	// the moment the caller dies.
	Audit string
}

// DeleteResult counts what a delete removed, descendants included.
type DeleteResult struct {
	InstancesDeleted     int64
	ExecutionsDeleted    int64
	EventsDeleted        int64
	QueueMessagesDeleted int64 // orchestrator and worker queues
}

// Add adds the counts of another result.
func (r *DeleteResult) Add(o DeleteResult) {
	r.InstancesDeleted += o.InstancesDeleted
	r.ExecutionsDeleted += o.ExecutionsDeleted
	r.EventsDeleted += o.EventsDeleted
	r.QueueMessagesDeleted += o.QueueMessagesDeleted
}

// DeleteInstanceBulkParams selects the roots to delete.
type DeleteInstanceBulkParams struct {
	TenantID string
	Filter   InstanceFilter
	// Limit bounds the trees deleted by this call (DefaultBulkLimit when 0),
	// applied after every filter.
	Limit int
	// Audit, when set, names the audit record (written by StartAudit)
	// that each transaction of the call counts what it removed into, in
	// that same transaction: the record's counts are then exact whatever
	// the moment the caller dies.
	Audit string
}

// BulkDeleteResult says what a bulk delete did and whether it is done.
type BulkDeleteResult struct {
	DeleteResult
	// Complete is true when no instance matching the filter is left to
	// delete; otherwise call again with the same params to go on.
	Complete bool
}

// PruneOptions says which executions to prune; both criteria are ANDed.
// The current execution and running ones are never pruned.
type PruneOptions struct {
	// KeepLast keeps the newest KeepLast executions (0: unset).
	KeepLast int
	// CompletedBefore, when set, prunes only executions completed strictly
	// before it (whatever time it is: nil is unset).
	CompletedBefore *time.Time
}

// PruneExecutionsParams names an instance and what to prune.
type PruneExecutionsParams struct {
	TenantID   string
	InstanceID string
	Options    PruneOptions
	// Audit, when set, names the audit record (written by StartAudit)
	// that each transaction of the call counts what it removed into, in
	// that same transaction: the record's counts are then exact whatever
	// the moment the caller dies.
	Audit string
}

// PruneResult counts what a prune removed.
type PruneResult struct {
	// InstancesProcessed counts the instances examined: for a bulk prune,
	// the matching instances with more than one execution stored; for a
	// prune of one instance, 1.
	InstancesProcessed int64
	// InstancesPruned counts the instances examined that lost at least one
	// execution.
	InstancesPruned   int64
	ExecutionsDeleted int64
	EventsDeleted     int64
}

// PruneExecutionsBulkParams selects the instances to prune.
type PruneExecutionsBulkParams struct {
	TenantID string
	Filter   InstanceFilter
	Options  PruneOptions
	// Limit bounds the instances processed by this call (DefaultBulkLimit
	// when 0), applied after every filter.
	Limit int
	// Audit, when set, names the audit record (written by StartAudit)
	// that each transaction of the call counts what it removed into, in
	// that same transaction: the record's counts are then exact whatever
	// the moment the caller dies.
	Audit string
}

// BulkPruneResult says what a bulk prune did and whether it is done.
type BulkPruneResult struct {
	PruneResult
	// Complete is true when every matching instance was processed;
	// otherwise call again with the same params to go on.
	Complete bool
}
