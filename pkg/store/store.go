// Package store is the contract between Orchard's services and its database:
// the runtime protocol that dispatchers and activity workers use (the seeds'
// provider API) and, beside it, the management operations. It holds
// interfaces, value types and sentinel errors only; implementations live in
// sub-packages (pkg/store/crdb) and prove themselves against one conformance
// suite (pkg/store/storetest).
//
// The store is agnostic of the engine: messages and history events are a kind
// and an opaque payload. Every tenant-scoped method names its tenant in its
// params; nothing here ever reads or writes across tenants except the
// all-tenant fetches, which only pick whose work comes next.
package store

import (
	"context"
	"slices"
	"time"
)

// Clock tells the store what time it is. Every time the store writes comes
// from it, never from the database, so tests control time.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Status is the status of an execution; an instance has the status of its
// current execution.
type Status string

// The statuses of an execution.
const (
	StatusRunning        Status = "Running"
	StatusCompleted      Status = "Completed"
	StatusFailed         Status = "Failed"
	StatusCancelled      Status = "Cancelled"
	StatusContinuedAsNew Status = "ContinuedAsNew"
)

// Terminal reports whether the status is final for an instance.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Statuses are every status, in lifecycle order.
func Statuses() []Status {
	return []Status{StatusRunning, StatusCompleted, StatusFailed, StatusCancelled, StatusContinuedAsNew}
}

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool { return slices.Contains(Statuses(), s) }

// Message is the content of an orchestrator queue item: what a turn consumes
// (a start, an activity result, a fired timer, an external event, a child's
// result, a cancel request). The engine defines the kinds and payloads.
type Message struct {
	Kind    string
	Payload []byte
}

// QueuedMessage is a message as it sits in an instance's queue.
type QueuedMessage struct {
	ID          string
	InstanceID  string
	ExecutionID int64 // the execution it is meant for; 0 for whichever is current
	Message
	VisibleAt time.Time
	CreatedAt time.Time
	// TraceContext is the W3C traceparent the message was queued with; empty
	// for none.
	TraceContext string
}

// HistoryEvent is one event of an execution's history.
type HistoryEvent struct {
	EventID   int64 // 1, 2, 3... within the execution
	Kind      string
	Payload   []byte
	CreatedAt time.Time // set by the store when the event is appended
}

// Instance is an orchestration instance with its current execution's state.
type Instance struct {
	TenantID           string
	InstanceID         string
	Name               string
	Version            string
	Status             Status
	CurrentExecutionID int64
	ParentInstanceID   string // empty for a root instance
	RootInstanceID     string // the instance itself for a root
	Input              []byte // the current execution's input
	Output             []byte // the current execution's output, when completed
	Error              string // the current execution's error, when failed
	Tags               map[string]string
	// Retention is the instance's own retention override, nil when it has
	// none. GetInstance reads it; listings leave it nil.
	Retention      *Retention
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    time.Time // zero while not terminal
	ExecutionCount int64
	EventCount     int64
}

// OrchestrationLease identifies the lease a dispatcher holds on an instance.
type OrchestrationLease struct {
	TenantID   string
	InstanceID string
	Token      string
	ExpiresAt  time.Time
}

// OrchestrationItem is what FetchOrchestrationItem hands a dispatcher: a
// leased instance, its current execution's history and its visible messages.
type OrchestrationItem struct {
	Lease    OrchestrationLease
	Instance Instance
	History  []HistoryEvent
	Messages []QueuedMessage
	// Claims is how many times in a row the instance was leased, this lease
	// included, without a lease being released by an ack or an abandon:
	// past 1, the turns of the leases before died with their process or
	// overran their lease. Such an instance is a suspect: its dispatcher
	// runs its turn alone, after StrikeOrchestrationLease.
	Claims int64
	// Strikes is how many turns of the instance in a row, each run alone
	// after a lapsed lease, died before they ended: the evidence that the
	// instance's own turn kills its process (a poison instance), which a
	// lease that lapsed because its process was killed is not.
	Strikes int64
	// Retention governs the instance as of the fetch: its tenant's policy
	// for its name, with its own override (Instance.Retention) over it.
	Retention Retention
	// RetentionUnread: no policy was read for the item, and Retention is
	// none. So it is with a turn that runs before its write (HeldTurn):
	// what needs the retention then reads the tenant's policy (GetTenant)
	// for Instance.Name, with Instance.Retention over it.
	RetentionUnread bool
}

// WorkLease identifies the lease a worker holds on an activity task.
type WorkLease struct {
	TenantID  string
	ID        string
	Token     string
	ExpiresAt time.Time
}

// WorkItem is an activity task leased by a worker.
type WorkItem struct {
	Lease       WorkLease
	InstanceID  string
	ExecutionID int64
	ActivityID  int64 // the event id that scheduled the activity
	Name        string
	TaskQueue   string
	Input       []byte
	Attempt     int
	CreatedAt   time.Time
	// TraceContext is the W3C traceparent of the turn that scheduled the
	// task; empty for none.
	TraceContext string
}

// Store is everything a store implementation provides.
type Store interface {
	Runtime
	Management
	Definitions
	Tenants
	Close()
}

// Tenants registers the tenants (whose work the all-tenant fetches
// consider) and keeps their state, limits and retention policy.
type Tenants interface {
	// CreateTenant registers an active tenant. ErrAlreadyExists when taken.
	CreateTenant(ctx context.Context, p *CreateTenantParams) error
	// GetTenant reads a tenant. ErrNotFound when there is none.
	GetTenant(ctx context.Context, p *GetTenantParams) (*Tenant, error)
	// ListTenants pages through the tenants by id.
	ListTenants(ctx context.Context, p *ListTenantsParams) ([]Tenant, error)
	// UpdateTenant changes a tenant's state, limits or retention policy and
	// returns it. ErrNotFound when there is none.
	UpdateTenant(ctx context.Context, p *UpdateTenantParams) (*Tenant, error)
}

// CreateTenantParams names a new tenant.
type CreateTenantParams struct {
	TenantID string
}

// Runtime is the protocol between dispatchers, workers and the database.
type Runtime interface {
	// StartOrchestration creates an instance, its first execution and its
	// start message atomically. ErrAlreadyExists when the id is taken.
	StartOrchestration(ctx context.Context, p *StartOrchestrationParams) (*StartOrchestrationResult, error)
	// Enqueue adds a message (an external event, a cancel request) to an
	// instance's queue. ErrNotFound when the instance does not exist,
	// ErrInstanceTerminal when it has ended: nothing would consume it.
	Enqueue(ctx context.Context, p *EnqueueParams) (*EnqueueResult, error)
	// GetInstance reads an instance and its current execution's state.
	GetInstance(ctx context.Context, p *GetInstanceParams) (*Instance, error)
	// GetHistory reads an execution's history (the current one when
	// ExecutionID is 0), in event id order.
	GetHistory(ctx context.Context, p *GetHistoryParams) ([]HistoryEvent, error)

	// FetchOrchestrationItem leases an instance that has visible messages
	// and no live lease. It returns nil and no error when there is none.
	// Without a tenant it serves the active tenants in turn: a suspended
	// tenant's work waits until the tenant is active again.
	// Messages for instances that do not exist are consumed and logged.
	FetchOrchestrationItem(ctx context.Context, p *FetchOrchestrationItemParams) (*OrchestrationItem, error)
	// RenewOrchestrationLease extends a live lease. ErrLeaseLost when the
	// lease expired, was taken over, or the instance was deleted.
	RenewOrchestrationLease(ctx context.Context, p *RenewOrchestrationLeaseParams) (time.Time, error)
	// StrikeOrchestrationLease adds one to the instance's strikes, under a
	// live lease, before a turn that runs alone; it returns the count.
	// ErrLeaseLost when the lease is no longer held.
	StrikeOrchestrationLease(ctx context.Context, lease OrchestrationLease) (int64, error)
	// AckOrchestrationItem commits a turn and releases the lease, all in one
	// transaction. ErrLeaseLost, and nothing written, when the lease is no
	// longer held by this token.
	AckOrchestrationItem(ctx context.Context, p *AckOrchestrationItemParams) error
	// FetchOrchestrationItems leases up to Max instances of one tenant at
	// once (one round trip), for dispatchers that run turns in batches.
	FetchOrchestrationItems(ctx context.Context, p *FetchOrchestrationItemsParams) ([]*OrchestrationItem, error)
	// AckOrchestrationItems commits several turns in one transaction and
	// one round trip. The result holds, for each turn, nil or ErrLeaseLost
	// (that turn wrote nothing); an error for the whole call means nothing
	// was written.
	AckOrchestrationItems(ctx context.Context, p *AckOrchestrationItemsParams) ([]error, error)
	// AbandonOrchestrationItem releases the lease without consuming
	// anything; the instance can be fetched again after Delay.
	AbandonOrchestrationItem(ctx context.Context, p *AbandonOrchestrationItemParams) error

	// FetchWorkItems leases up to Max of the oldest visible tasks of a
	// task queue at once (one round trip), each with a lease of its own.
	// It returns none and no error when there is none. Without a tenant it
	// serves the active tenants in turn, as FetchOrchestrationItem does:
	// one fetch leases the tasks of one tenant.
	FetchWorkItems(ctx context.Context, p *FetchWorkItemsParams) ([]*WorkItem, error)
	// RenewWorkItemLease extends a live task lease. ErrLeaseLost when the
	// task is gone (cancelled, instance deleted) or the lease lapsed: the
	// worker's signal to cancel the activity.
	RenewWorkItemLease(ctx context.Context, p *RenewWorkItemLeaseParams) (time.Time, error)
	// AckWorkItem deletes the task and enqueues its result for the
	// instance, atomically. ErrLeaseLost, and nothing enqueued, when the
	// task is gone or leased by someone else.
	AckWorkItem(ctx context.Context, p *AckWorkItemParams) error
	// AbandonWorkItem releases a task so it can be fetched again after Delay.
	AbandonWorkItem(ctx context.Context, p *AbandonWorkItemParams) error
}

// StartOrchestrationParams describes a new instance.
type StartOrchestrationParams struct {
	TenantID   string
	InstanceID string
	Name       string
	Version    string
	Input      []byte
	Tags       map[string]string
	// Retention overrides the tenant's retention policy for this instance.
	Retention *Retention
	// Start is the message the first turn consumes.
	Start Message
	// TraceContext is the W3C traceparent of the call's span, stored with
	// the start message: the first turn continues its trace. At most 64
	// bytes; empty for none.
	TraceContext string
	// MaxRunning, when set, refuses the start with ErrTooManyRunning when
	// the tenant already has that many running instances, judged in the
	// start's own statement (concurrent starts may pass it together).
	MaxRunning *int64
	// Eager, when set, leases the new instance in the start's transaction
	// and runs its first turn there (eager start, see EagerLease): the
	// turn needs no claim, and no commit of its own. A turn that First
	// would write with the start is written so.
	Eager *EagerLease
	// First, for a start with no Eager, runs the instance's first turn
	// before the write, in a dispatcher of the caller's process (First.Hold,
	// on the item a claim under First.Token would return). A turn that
	// leaves the instance running on execution 1, consuming its start
	// message, and only appends events, schedules tasks and sets timers on
	// the instance, is written with the start, batched with the tenant's
	// other starts: the instance is created as the turn's ack leaves it,
	// and no claim or ack of its own follows (First.Held; Hold.Done hears
	// that it was acked). Any other turn is void (Done hears ErrNotFound):
	// the instance is started as without First, for a claim.
	First *EagerLease
}

// EagerLease asks a write that makes an instance due (a start, a task's
// completion) to lease the instance in its own transaction, as a claim
// would (FetchOrchestrationItems), and to run its turn there (Hold), for
// a dispatcher loop waiting in the caller's process: the write and the
// turn's ack commit together. It is only a chance: nothing is leased, and
// no turn runs, when the instance is leased already.
type EagerLease struct {
	// Token and Duration are the lease's.
	Token    string
	Duration time.Duration
	// Hold runs the leased instance's turn inside the write's transaction.
	Hold HeldTurn
	// Ahead, for a completion (AckWorkItem), is its instance's item as
	// Hold's last ack of it left it (HeldTurn.Ahead). The completion's
	// turn then runs before its write, on Ahead and the completion's own
	// message, and the write, the turn's ack and COMMIT go in one round
	// trip. The turn holds only if, once the write leased the instance,
	// the instance is as Ahead has it: on the same execution, with the
	// same events, executions and update time, not being deleted, with no
	// other visible message, and its lease was neither held nor lapsed.
	// Otherwise the turn is void, and the completion commits alone.
	Ahead *OrchestrationItem
	// Held is set by the call when Hold's turn ran in the write's
	// transaction, which committed: Hold.Done was called.
	Held bool
}

// A HeldTurn is the turn of the instance an eager write leases, run before
// the write commits (EagerLease.Hold). A completion's turn runs after its
// write, which may lease nothing (Turn is then not called), or before it
// (EagerLease.Ahead); a start's first turn needs nothing the write reads
// back and runs before it. A turn that runs before its write gets an
// item whose retention was not read (OrchestrationItem.RetentionUnread).
// The write may fail after Turn; whatever happens, Done is called once
// Turn was.
type HeldTurn interface {
	// Turn gets the leased instance, as a claim would have returned it,
	// and returns the ack of its turn to commit with the write. Nil commits
	// the write alone: Done then finishes the turn after the commit.
	Turn(ctx context.Context, it *OrchestrationItem) *AckOrchestrationItemParams
	// Done reports the end of the write's transaction. acked: the ack that
	// Turn returned committed with the write, and result is the turn's own
	// outcome, as AckOrchestrationItems reports it (nil, or ErrLeaseLost).
	// Otherwise nothing of the ack was written. With result ErrNotFound,
	// the write that ran after Turn leased nothing (or, after an Ahead
	// item's turn, found the instance changed), or failed: the turn is
	// void, and there is nothing to ack or abandon. Else the holder acks
	// (or abandons) the item on its own, as if it had claimed it: the
	// lease is its own if the write committed it, lost if the write failed
	// (the store then makes the write again, without any lease).
	Done(ctx context.Context, acked bool, result error)
	// Ahead returns, for the caller of a completion's write
	// (EagerLease.Ahead), the instance's item as the holder's last ack of
	// it left it, without messages, when the holder knows it and its
	// current execution is execution; nil otherwise. An item is given
	// once.
	Ahead(tenant, instance string, execution int64) *OrchestrationItem
}

// StartOrchestrationResult tells what was created.
type StartOrchestrationResult struct {
	ExecutionID int64
	CreatedAt   time.Time
}

// EnqueueParams addresses a message to an instance.
type EnqueueParams struct {
	TenantID    string
	InstanceID  string
	ExecutionID int64 // 0: whichever execution is current when it is consumed
	Message     Message
	// Delay makes the message visible only after this long.
	Delay time.Duration
	// TraceContext is the W3C traceparent stored with the message (at most
	// 64 bytes; empty for none): the turn that consumes it continues it.
	TraceContext string
}

// EnqueueResult identifies the queued message.
type EnqueueResult struct {
	MessageID string
}

// GetInstanceParams names an instance.
type GetInstanceParams struct {
	TenantID   string
	InstanceID string
}

// GetHistoryParams names a page of an execution's history.
type GetHistoryParams struct {
	TenantID    string
	InstanceID  string
	ExecutionID int64 // 0: the current execution
	// AfterEventID starts the page after this event id.
	AfterEventID int64
	// Limit bounds the page; 0 reads to the end.
	Limit int
}

// FetchOrchestrationItemParams says whose work to fetch and for how long.
type FetchOrchestrationItemParams struct {
	// TenantID restricts the fetch to one tenant; empty fetches for all
	// registered tenants, in turn, so no tenant's backlog starves another's.
	TenantID      string
	LeaseDuration time.Duration
}

// FetchOrchestrationItemsParams says whose work to fetch, how much, and for
// how long.
type FetchOrchestrationItemsParams struct {
	FetchOrchestrationItemParams
	// Max bounds the instances leased (1 when 0).
	Max int
	// SkipZombies leaves out the look for zombie messages (visible
	// messages of instances that no longer exist or have ended, which no
	// claim takes) that a fetch makes otherwise, work or none. It is for
	// a caller that fetches often and looks for them now and then instead:
	// they are rare (a message sent to an instance deleted meanwhile, a
	// child's result to a parent that ended first), and each look is a
	// statement.
	SkipZombies bool
}

// AckOrchestrationItemsParams holds the outcomes of several turns.
type AckOrchestrationItemsParams struct {
	Turns []*AckOrchestrationItemParams
}

// RenewOrchestrationLeaseParams extends a lease.
type RenewOrchestrationLeaseParams struct {
	Lease    OrchestrationLease
	Duration time.Duration
}

// AckOrchestrationItemParams is the outcome of one turn.
type AckOrchestrationItemParams struct {
	Lease OrchestrationLease
	// ExecutionID is the execution the turn ran on.
	ExecutionID int64
	// MessageIDs are the fetched messages the turn consumed.
	MessageIDs []string
	// History is appended to the execution; event ids continue its history.
	History []HistoryEvent
	// Status is the execution's status after the turn.
	Status Status
	Output []byte // when Completed
	Error  string // when Failed or Cancelled
	// ContinueAsNew starts the next execution when Status is ContinuedAsNew.
	ContinueAsNew *ContinueAsNew
	// Messages are enqueued for instances of the same tenant: timers to
	// itself (with a delay), results to its parent, cancels to its children.
	Messages []OutgoingMessage
	// Children are sub-orchestrations to create.
	Children []ChildStart
	// Activities are tasks to put in worker queues.
	Activities []ActivityTask
	// CancelActivities are the activity ids (of ExecutionID) whose tasks are
	// deleted: a worker holding one sees its renew and ack fail.
	CancelActivities []int64
	// WithdrawMessages are messages that earlier turns queued for this
	// instance (timers) and that will never matter now: queued messages of
	// the instance equal to one of them (kind and payload) are deleted.
	WithdrawMessages []Message
	// Acked is set by the call: once the turn's ack committed, what it
	// wrote to the instance's row beyond the turn's decision; nil when it
	// did not commit, or the lease was lost.
	Acked *AckedInstance
}

// AckedInstance is what a turn's ack wrote to its instance's row that the
// turn did not decide: with the instance as its turn was fetched and the
// turn's own outcome, the instance as a read right after the ack returns
// it (name, version, parent, input, tags and retention do not change).
// UpdatedAt is also when the events the ack appended were created.
type AckedInstance struct {
	UpdatedAt, CompletedAt     time.Time
	ExecutionCount, EventCount int64
}

// AckedInstance returns the instance as p's committed ack left it, from
// the instance as p's turn was fetched; false when the ack did not commit
// (Acked is nil).
func (p *AckOrchestrationItemParams) AckedInstance(fetched Instance) (Instance, bool) {
	if p.Acked == nil {
		return Instance{}, false
	}
	in := fetched
	in.Status, in.CurrentExecutionID, in.Output, in.Error = p.Status, p.ExecutionID, p.Output, p.Error
	if next := p.ContinueAsNew; next != nil {
		in.Status, in.CurrentExecutionID, in.Input, in.Output, in.Error = StatusRunning, p.ExecutionID+1, next.Input, nil, ""
	}
	in.UpdatedAt, in.CompletedAt = p.Acked.UpdatedAt, p.Acked.CompletedAt
	in.ExecutionCount, in.EventCount = p.Acked.ExecutionCount, p.Acked.EventCount
	return in, true
}

// Next returns the item of the instance's next turn as p's committed ack
// left it, from the item p's turn was fetched with: the instance
// (AckedInstance), and its execution's history with the turn's events
// appended at the ack's update time; no lease, messages or retention.
// False when the ack did not commit, or did not leave the instance
// running on the same execution.
func (p *AckOrchestrationItemParams) Next(fetched *OrchestrationItem) (*OrchestrationItem, bool) {
	in, ok := p.AckedInstance(fetched.Instance)
	if !ok || in.Status != StatusRunning || in.CurrentExecutionID != fetched.Instance.CurrentExecutionID {
		return nil, false
	}
	h := make([]HistoryEvent, 0, len(fetched.History)+len(p.History))
	h = append(h, fetched.History...)
	for _, ev := range p.History {
		ev.CreatedAt = p.Acked.UpdatedAt
		h = append(h, ev)
	}
	return &OrchestrationItem{Instance: in, History: h}, true
}

// ContinueAsNew describes the next execution of a continue-as-new chain.
type ContinueAsNew struct {
	Input []byte
	Start Message
}

// OutgoingMessage is a message a turn sends to an instance of its tenant.
type OutgoingMessage struct {
	InstanceID  string
	ExecutionID int64
	Message     Message
	Delay       time.Duration
}

// ChildStart describes a sub-orchestration to create.
type ChildStart struct {
	InstanceID string
	Name       string
	Version    string
	Input      []byte
	Tags       map[string]string
	Start      Message
	// IfTaken is delivered to the parent instead when the id is taken.
	IfTaken Message
}

// ActivityTask describes an activity task to schedule.
type ActivityTask struct {
	ActivityID int64
	Name       string
	TaskQueue  string
	Input      []byte
	Attempt    int
	Delay      time.Duration
	// TraceContext is the W3C traceparent of the turn's span (at most 64
	// bytes; empty for none): the worker continues it.
	TraceContext string
	// Lease, when set, inserts the task leased already, with this ID,
	// Token and ExpiresAt (the turn's tenant): the ack hands the task to a
	// poll of its process that waits for the task queue (notify.Handoff),
	// which then needs no claim of its own. Only for a task due now.
	Lease *WorkLease
}

// AbandonOrchestrationItemParams releases a lease.
type AbandonOrchestrationItemParams struct {
	Lease OrchestrationLease
	Delay time.Duration
}

// FetchWorkItemsParams says which task queue to fetch from, and how much.
type FetchWorkItemsParams struct {
	// TenantID restricts the fetch to one tenant; empty fetches for all
	// registered tenants, in turn.
	TenantID      string
	TaskQueue     string
	LeaseDuration time.Duration
	// Max bounds the tasks leased (1 when 0).
	Max int
}

// RenewWorkItemLeaseParams extends a task lease.
type RenewWorkItemLeaseParams struct {
	Lease    WorkLease
	Duration time.Duration
}

// AckWorkItemParams completes a task.
type AckWorkItemParams struct {
	Lease WorkLease
	// Result is enqueued for the task's instance; nil deletes the task
	// without enqueuing anything.
	Result *Message
	// TraceContext is the W3C traceparent stored with Result (at most 64
	// bytes; empty for none): the turn that consumes it continues it.
	TraceContext string
	// Eager, with a Result, leases the task's instance in the same
	// transaction when it is free, and runs its turn there (eager
	// completion, see EagerLease).
	Eager *EagerLease
	// Next, with a Result and no Eager, runs the instance's next turn
	// before the write, on Next.Ahead (the instance as the holder's last
	// ack left it, first execution) and the result. A turn that ends the
	// instance (Completed, Failed), or only appends events, schedules
	// tasks and sets timers on it, is written in place of the result,
	// batched with the tenant's other completions, if the instance is
	// still as Next.Ahead has it, free, with nothing else visible; no
	// claim or ack follows (Next.Held). Otherwise the turn is void (Done
	// hears ErrNotFound), and the result is enqueued as without Next.
	Next *EagerLease
}

// AbandonWorkItemParams releases a task.
type AbandonWorkItemParams struct {
	Lease WorkLease
	Delay time.Duration
}
