package store

import (
	"context"
	"encoding/json"
	"time"
)

// Janitor is what retention, the deletion audit log, operations and tenant
// erasure need beyond Management: candidate reads that judge each instance
// by its own rule, the records of what was deleted, and bounded deletes of
// a whole tenant. Like Usage it is a contract beside Store; the CockroachDB
// store implements it.
type Janitor interface {
	// ListExpiryCandidates reads terminal root instances of one status that
	// completed before a cutoff, oldest first, with what judging their
	// retention needs. Instances with a retention of their own come from
	// their own scan (Overrides), which judges them in the database.
	ListExpiryCandidates(ctx context.Context, p *ListExpiryCandidatesParams) ([]ExpiryCandidate, error)
	// DeleteExpired deletes the trees of roots judged expired, small trees
	// many to a transaction. A root is skipped when it was replaced since
	// (its completion time is not the candidate's) or a member of its tree
	// runs.
	DeleteExpired(ctx context.Context, p *DeleteExpiredParams) (*DeleteResult, error)
	// SummarizeTrees counts, for each root, its tree's instances,
	// executions and history events, and whether all of it is terminal.
	SummarizeTrees(ctx context.Context, p *SummarizeTreesParams) (map[string]TreeSummary, error)
	// ListChainCandidates reads, in id order, the instances that have past
	// executions a prune could take.
	ListChainCandidates(ctx context.Context, p *ListChainCandidatesParams) ([]ChainCandidate, error)
	// CountPrunable counts what PruneExecutionsBulk would take from these
	// instances with these options, without taking it.
	CountPrunable(ctx context.Context, p *CountPrunableParams) (PruneResult, error)

	// StartJanitorRun records that a retention run began; FinishJanitorRun
	// records its outcome.
	StartJanitorRun(ctx context.Context, p *StartJanitorRunParams) (string, error)
	FinishJanitorRun(ctx context.Context, p *JanitorRun) error

	// StartAudit writes a record before the work it describes (or finds
	// the one a crashed attempt left, and keeps it); FinishAudit records how
	// the work ended. What the work removed is not passed around: each
	// delete, prune or erase given the record's id (their Audit params)
	// counts it into the record in its own transactions (tallies), and
	// FinishAudit folds those into the record's result. ListAuditRecords
	// pages through them, newest first, each with its tallies counted;
	// PruneAuditRecords deletes records (and their tallies) that started
	// before a time, a bounded number at a time.
	StartAudit(ctx context.Context, r *AuditRecord) error
	FinishAudit(ctx context.Context, p *FinishAuditParams) error
	ListAuditRecords(ctx context.Context, p *ListAuditRecordsParams) ([]AuditRecord, error)
	PruneAuditRecords(ctx context.Context, p *PruneAuditRecordsParams) (int64, error)
	// GetRootTally sums what the DeleteInstance calls under an audit
	// record removed of one root's tree, in the transactions that
	// committed; ErrNotFound when none did. It sees the record's work until
	// FinishAudit (which folds the tallies into the record): a graceful
	// delete retried after a crash tells by it a root it deleted from one
	// that was gone before.
	GetRootTally(ctx context.Context, p *GetRootTallyParams) (*AuditResult, error)

	// CreateOperation records work for the janitor; GetOperation reads it;
	// ListOpenOperations pages through the pending and running ones of
	// every tenant; UpdateOperation changes its state and result.
	CreateOperation(ctx context.Context, op *Operation) error
	GetOperation(ctx context.Context, p *GetOperationParams) (*Operation, error)
	ListOpenOperations(ctx context.Context, limit int) ([]Operation, error)
	UpdateOperation(ctx context.Context, op *Operation) error

	// EraseTenantRows deletes a bounded number of the rows a tenant has, in
	// every table, in an order that never leaves a dangling reference; the
	// tenant's row and its audit records go last. Done is true when nothing
	// of the tenant is left but what Keep names.
	EraseTenantRows(ctx context.Context, p *EraseTenantRowsParams) (*EraseResult, error)
}

// ListExpiryCandidatesParams selects terminal roots by completion time.
type ListExpiryCandidatesParams struct {
	TenantID string
	// Status is the terminal status to read.
	Status Status
	// Names, when set, reads only roots of these names; ExcludeNames
	// leaves out roots of these names. A scan per rule reads only what
	// that rule lets go.
	Names, ExcludeNames []string
	// Overrides reads the instances that have a retention of their own
	// instead of those that follow the policy, and only those their rule
	// (their own retention over Policy, field by field) lets go at
	// CompletedBefore.
	Overrides bool
	Policy    *RetentionPolicy
	// CompletedBefore is the strict upper bound of completion times.
	CompletedBefore time.Time
	// After continues after this candidate (nil: from the oldest).
	After *ExpiryCandidate
	Limit int
}

// ExpiryCandidate is a terminal root instance with what judging its
// retention needs.
type ExpiryCandidate struct {
	InstanceID  string
	Name        string
	Status      Status
	CompletedAt time.Time
	// Retention is the instance's own retention, nil when it follows the
	// policy.
	Retention *Retention
}

// DeleteExpiredParams names the roots to delete, as ListExpiryCandidates
// read them; at most MaxFilterIDs.
type DeleteExpiredParams struct {
	TenantID string
	Roots    []ExpiryCandidate
	// Audit, when set, names the audit record each transaction counts
	// what it removed into (see DeleteInstanceParams.Audit).
	Audit string
}

// SummarizeTreesParams names roots.
type SummarizeTreesParams struct {
	TenantID string
	RootIDs  []string
}

// TreeSummary is what deleting a tree would remove.
type TreeSummary struct {
	Instances  int64
	Executions int64
	Events     int64
	// Terminal is true when no instance of the tree runs.
	Terminal bool
}

// ListChainCandidatesParams pages through instances with past executions.
type ListChainCandidatesParams struct {
	TenantID string
	AfterID  string
	Limit    int
}

// ChainCandidate is an instance whose past executions a prune may take.
type ChainCandidate struct {
	InstanceID     string
	RootInstanceID string
	Name           string
	Retention      *Retention
}

// CountPrunableParams names instances and prune options.
type CountPrunableParams struct {
	TenantID    string
	InstanceIDs []string
	Options     PruneOptions
}

// StartJanitorRunParams describes a run that begins.
type StartJanitorRunParams struct {
	TenantID  string
	Triggered bool
}

// Actors of audit records that are not a token's subject.
const (
	ActorJanitor       = "janitor"
	ActorPlatformAdmin = "platform-admin"
)

// Audit actions.
const (
	AuditDeleteInstance  = "delete_instance"
	AuditDeleteInstances = "delete_instances"
	AuditPruneExecutions = "prune_executions"
	AuditPruneBulk       = "prune_executions_bulk"
	AuditRetention       = "retention"
	AuditEraseTenant     = "erase_tenant"
	AuditGracefulDelete  = "graceful_delete"
)

// AuditRecord says who deleted or pruned what, when, and how it ended.
type AuditRecord struct {
	TenantID string
	RecordID string
	// Actor is the token's subject, ActorJanitor or ActorPlatformAdmin;
	// Role the role it acted with.
	Actor string
	Role  string
	// Action is one of the Audit* actions; Request the call as JSON (ids
	// or filter, force, options).
	Action  string
	Request json.RawMessage
	// Result counts what went; Complete is false when work is left for
	// another call or run.
	Result     AuditResult
	StartedAt  time.Time
	FinishedAt time.Time // zero: the work did not finish (yet)
	Error      string
}

// FinishAuditParams says how the work of an audit record ended.
type FinishAuditParams struct {
	TenantID string
	RecordID string
	// Complete is false when work is left for another call or run.
	Complete bool
	// FinishedAt set marks the record finished; zero leaves it open (a
	// job that goes on later).
	FinishedAt time.Time
	Error      string
}

// GetRootTallyParams names a root deleted under an audit record.
type GetRootTallyParams struct {
	TenantID string
	RecordID string
	RootID   string
}

// AuditResult counts what a delete or prune removed: instances (with
// their trees' members), executions and history events, or rows of any
// table for an erasure. A prune removes no instance.
type AuditResult struct {
	Instances  int64 `json:"instances,omitempty"`
	Executions int64 `json:"executions,omitempty"`
	Events     int64 `json:"events,omitempty"`
	Rows       int64 `json:"rows,omitempty"`
	Complete   bool  `json:"complete,omitempty"`
}

// ListAuditRecordsParams pages through audit records, newest first.
type ListAuditRecordsParams struct {
	// TenantID restricts to one tenant; empty lists every tenant's
	// (platform admins only).
	TenantID string
	// Action restricts to one action; empty: all.
	Action string
	// StartedAfter and StartedBefore bound the start time (inclusive,
	// strict); nil: unbounded.
	StartedAfter  *time.Time
	StartedBefore *time.Time
	// After continues after this record (the last of the previous page).
	After *AuditPosition
	Limit int
}

// AuditPosition is a record's place in the newest-first order.
type AuditPosition struct {
	StartedAt time.Time
	TenantID  string
	RecordID  string
}

// PruneAuditRecordsParams deletes old records of every tenant.
type PruneAuditRecordsParams struct {
	StartedBefore time.Time
	Limit         int
	// KeepActions are never pruned (erasure tombstones are kept as long
	// as the other records).
	KeepActions []string
}

// Operation states.
const (
	OperationPending   = "pending"
	OperationRunning   = "running"
	OperationSucceeded = "succeeded"
	OperationFailed    = "failed"
)

// Operation kinds.
const (
	OperationGracefulDelete = "graceful_delete"
)

// Operation is work the API handed to the janitor, for the caller to poll.
type Operation struct {
	TenantID    string
	OperationID string
	Kind        string
	Request     json.RawMessage
	State       string
	Result      json.RawMessage
	Error       string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	Deadline    time.Time
}

// GetOperationParams names an operation.
type GetOperationParams struct {
	TenantID    string
	OperationID string
}

// EraseTenantRowsParams bounds one step of a tenant's erasure.
type EraseTenantRowsParams struct {
	TenantID string
	// MaxRows bounds the rows deleted by this call, in transactions of at
	// most the store's rows per transaction.
	MaxRows int
	// KeepRecordID is the audit record that survives the erasure (its
	// tombstone); when set, each transaction counts the rows it erased
	// into it, in that transaction.
	KeepRecordID string
}

// EraseResult counts what an erasure step deleted.
type EraseResult struct {
	// Rows by table.
	Rows map[string]int64
	Done bool
}
