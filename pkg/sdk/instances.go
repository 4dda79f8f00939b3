package sdk

import (
	"context"
	"errors"
	"iter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// StartOption configures Start.
type StartOption func(*startOptions)

type startOptions struct {
	req *orchardv1.StartOrchestrationRequest
}

// WithVersion runs this version of the definition instead of the latest.
func WithVersion(version string) StartOption {
	return func(o *startOptions) { o.req.Version = version }
}

// WithInstanceID gives the instance this id instead of a fresh UUID. It
// makes Start idempotent, so a Start that fails with Unavailable is
// retried: repeating a start that did happen creates nothing more.
func WithInstanceID(id string) StartOption {
	return func(o *startOptions) { o.req.InstanceId = id }
}

// WithTags tags the instance (at most 32 tags), to find it by in listings.
func WithTags(tags map[string]string) StartOption {
	return func(o *startOptions) { o.req.Tags = tags }
}

// WithRetention keeps the instance for d once it is terminal (at most 3650
// days; 0: until the janitor's next run), overriding the tenant's
// retention policy.
func WithRetention(d time.Duration) StartOption {
	return func(o *startOptions) { o.req.Retention = duration(d) }
}

// Start starts an instance of the registered definition name, with input
// encoded as JSON (nil: null; a json.RawMessage is sent as it is), and
// returns the instance's id.
//
// Without WithInstanceID a retry could start a second instance, so Start
// is retried only when the request surely did not reach the server.
// ErrAlreadyExists: the id is taken by another instance.
func (c *Client) Start(ctx context.Context, name string, input any, opts ...StartOption) (string, error) {
	in, err := encodeJSON("input", input)
	if err != nil {
		return "", err
	}
	req := &orchardv1.StartOrchestrationRequest{Name: name, Input: in}
	for _, opt := range opts {
		opt(&startOptions{req: req})
	}
	idem := notIdempotent
	if req.InstanceId != "" {
		idem = idempotent
	}
	resp, err := call(ctx, c, idem, c.clients.StartOrchestration, req)
	if err != nil {
		return "", err
	}
	return resp.GetInstanceId(), nil
}

// RaiseEvent delivers an external event to an instance, for its wait_event
// steps; payload is encoded as JSON. Raising the same event twice delivers
// it twice, so RaiseEvent is retried only when the request surely did not
// reach the server.
func (c *Client) RaiseEvent(ctx context.Context, instanceID, event string, payload any) error {
	data, err := encodeJSON("payload", payload)
	if err != nil {
		return err
	}
	_, err = call(ctx, c, notIdempotent, c.clients.RaiseEvent,
		&orchardv1.RaiseEventRequest{InstanceId: instanceID, Name: event, Payload: data})
	return err
}

// Cancel asks a running instance to stop: its outstanding activities and
// children are cancelled and it ends as Cancelled, with reason as its
// error. Cancelling a terminal instance does nothing. Cancel returns once
// the request is queued; Wait for the instance to see it end.
func (c *Client) Cancel(ctx context.Context, instanceID, reason string) error {
	_, err := call(ctx, c, idempotent, c.clients.CancelInstance,
		&orchardv1.CancelInstanceRequest{InstanceId: instanceID, Reason: reason})
	return err
}

// Get reads an instance.
func (c *Client) Get(ctx context.Context, instanceID string) (*Instance, error) {
	resp, err := call(ctx, c, idempotent, c.clients.GetInstance, &orchardv1.GetInstanceRequest{InstanceId: instanceID})
	if err != nil {
		return nil, err
	}
	return instanceFromProto(resp.GetInstance()), nil
}

// waitPoll is the longest single WaitForCompletion call Wait makes.
const waitPoll = 30 * time.Second

// Wait waits until the instance is terminal (Completed, Failed or
// Cancelled) and returns it; it ends early with ctx's error. It long-polls
// the server, so waiting costs a call every 30 seconds, not a busy loop.
func (c *Client) Wait(ctx context.Context, instanceID string) (*Instance, error) {
	for {
		timeout := waitPoll
		if deadline, ok := ctx.Deadline(); ok {
			timeout = max(min(timeout, time.Until(deadline)), 0)
		}
		resp, err := call(ctx, c, idempotent, c.clients.WaitForCompletion,
			&orchardv1.WaitForCompletionRequest{InstanceId: instanceID, Timeout: duration(timeout)})
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, err
		}
		if resp.GetDone() {
			return instanceFromProto(resp.GetInstance()), nil
		}
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
	}
}

// History reads the whole history of one execution of an instance, every
// page; executionID 0 reads the current execution's. A running execution's
// history grows: History returns what there was when it read the last page.
func (c *Client) History(ctx context.Context, instanceID string, executionID int64) (*History, error) {
	h := &History{ExecutionID: executionID}
	var after int64
	for {
		resp, err := call(ctx, c, idempotent, c.clients.GetHistory, &orchardv1.GetHistoryRequest{
			InstanceId: instanceID, ExecutionId: h.ExecutionID, AfterEventId: after, PageSize: 1000,
		})
		if err != nil {
			return nil, err
		}
		// Pin the execution the first page was read from, so that the pages
		// stay on one execution even if the instance continues as new.
		h.ExecutionID = resp.GetExecutionId()
		for _, e := range resp.GetEvents() {
			h.Events = append(h.Events, &HistoryEvent{
				ID: e.GetEventId(), Kind: e.GetKind(), Payload: rawJSON(e.GetPayload()), CreatedAt: fromTimestamp(e.GetCreatedAt()),
			})
		}
		next := resp.GetNextAfterEventId()
		if next == 0 || next <= after || len(resp.GetEvents()) == 0 {
			return h, nil
		}
		after = next
	}
}

// Executions lists an instance's executions that were not pruned, oldest
// first.
func (c *Client) Executions(ctx context.Context, instanceID string) ([]*Execution, error) {
	resp, err := call(ctx, c, idempotent, c.clients.ListExecutions, &orchardv1.ListExecutionsRequest{InstanceId: instanceID})
	if err != nil {
		return nil, err
	}
	out := make([]*Execution, 0, len(resp.GetExecutions()))
	for _, e := range resp.GetExecutions() {
		out = append(out, executionFromProto(e))
	}
	return out, nil
}

// ListOption configures List and ListDefinitions.
type ListOption func(*listOptions)

type listOptions struct {
	order    Order
	pageSize int
}

// WithOrder sets a listing's order (default NewestFirst). ListDefinitions
// ignores it: definitions come by name, then version.
func WithOrder(o Order) ListOption { return func(l *listOptions) { l.order = o } }

// WithPageSize sets how many items each call fetches (1 to 1000; default:
// the server's, 100). It changes the number of calls, not what the
// iterator yields.
func WithPageSize(n int) ListOption { return func(l *listOptions) { l.pageSize = n } }

func listOpts(opts []ListOption) (listOptions, error) {
	var l listOptions
	for _, opt := range opts {
		opt(&l)
	}
	if l.pageSize < 0 || l.pageSize > 1000 {
		return l, invalidArgument("page_size", "must be between 1 and 1000, not %d", l.pageSize)
	}
	if _, ok := orderToProto[l.order]; !ok {
		return l, invalidArgument("order", "unknown order %d", l.order)
	}
	return l, nil
}

// List iterates over every instance matching the filter, fetching pages as
// the loop needs them. A failure ends the iteration with its error as the
// last pair; stopping the loop early fetches nothing more.
//
//	for in, err := range client.List(ctx, sdk.Filter{Statuses: []sdk.Status{sdk.StatusFailed}}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(in.ID, in.Error)
//	}
func (c *Client) List(ctx context.Context, filter Filter, opts ...ListOption) iter.Seq2[*Instance, error] {
	return func(yield func(*Instance, error) bool) {
		l, err := listOpts(opts)
		if err != nil {
			yield(nil, err)
			return
		}
		f, err := filter.toProto("filter")
		if err != nil {
			yield(nil, err)
			return
		}
		req := &orchardv1.ListInstancesRequest{Filter: f, Order: orderToProto[l.order], PageSize: int32(l.pageSize)}
		for {
			resp, err := call(ctx, c, idempotent, c.clients.ListInstances, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, in := range resp.GetInstances() {
				if !yield(instanceFromProto(in), nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req = proto.CloneOf(req)
			req.PageToken = resp.GetNextPageToken()
		}
	}
}

// Count counts the instances matching the filter, in total and by status.
func (c *Client) Count(ctx context.Context, filter Filter) (*Counts, error) {
	f, err := filter.toProto("filter")
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c, idempotent, c.clients.CountInstances, &orchardv1.CountInstancesRequest{Filter: f})
	if err != nil {
		return nil, err
	}
	b := resp.GetByStatus()
	return &Counts{Total: resp.GetTotal(), ByStatus: map[Status]int64{
		StatusRunning:        b.GetRunning(),
		StatusCompleted:      b.GetCompleted(),
		StatusFailed:         b.GetFailed(),
		StatusCancelled:      b.GetCancelled(),
		StatusContinuedAsNew: b.GetContinuedAsNew(),
	}}, nil
}

// Tree returns the ids of an instance and all its descendants, children
// before parents: the order in which they can be deleted.
func (c *Client) Tree(ctx context.Context, instanceID string) ([]string, error) {
	resp, err := call(ctx, c, idempotent, c.clients.GetInstanceTree, &orchardv1.GetInstanceTreeRequest{InstanceId: instanceID})
	if err != nil {
		return nil, err
	}
	return resp.GetInstanceIds(), nil
}

// Delete deletes a root instance with its whole tree, executions, history
// and queued messages, atomically, and counts what went. Without force it
// fails with ErrRunning when an instance of the tree runs; a
// sub-orchestration fails with ErrSubOrchestration (delete its root).
//
// Delete is retried on Unavailable; when a retry finds the instance gone,
// the earlier attempt deleted it, and Delete returns zero counts and no
// error.
func (c *Client) Delete(ctx context.Context, instanceID string, force bool) (DeleteCounts, error) {
	var counts DeleteCounts
	resp, attempts, err := callCounted(ctx, c, idempotent, c.clients.DeleteInstance,
		&orchardv1.DeleteInstanceRequest{InstanceId: instanceID, Force: force})
	if err != nil {
		if attempts > 1 && errors.Is(err, ErrNotFound) {
			return counts, nil
		}
		return counts, err
	}
	counts.add(resp.GetCounts())
	return counts, nil
}

// DeleteSelection selects the terminal root instances DeleteMany deletes,
// each with its whole tree. Its criteria are ANDed; at least one must be
// set. Running instances, and trees with a running member, are skipped.
type DeleteSelection struct {
	// InstanceIDs: only these instances (at most 1000).
	InstanceIDs []string
	// CompletedBefore: only instances that ended before this time (nil:
	// unset).
	CompletedBefore *time.Time
	// Filter: only instances matching it. A selection with no criterion at
	// all is refused unless the call says AllInstances.
	Filter *Filter
}

// BulkOption configures DeleteMany and PruneMany.
type BulkOption func(*bulkOptions)

type bulkOptions struct {
	batch          int
	all            bool
	deleteProgress func(DeleteCounts)
	pruneProgress  func(PruneCounts)
}

// WithBatchSize bounds what each call of a bulk operation handles: trees
// for DeleteMany, instances for PruneMany (1 to 1000; default 1000).
func WithBatchSize(n int) BulkOption { return func(b *bulkOptions) { b.batch = n } }

// AllInstances lets DeleteMany and PruneMany act on every instance (every
// terminal root instance for DeleteMany) when their selection has no
// criterion. Without it, such a call is refused: a destructive call never
// widens to everything by omission. With a criterion, it is refused too.
func AllInstances() BulkOption { return func(b *bulkOptions) { b.all = true } }

// WithDeleteProgress calls fn after each call of DeleteMany with the counts
// so far.
func WithDeleteProgress(fn func(total DeleteCounts)) BulkOption {
	return func(b *bulkOptions) { b.deleteProgress = fn }
}

// WithPruneProgress calls fn after each call of PruneMany with the counts
// so far.
func WithPruneProgress(fn func(total PruneCounts)) BulkOption {
	return func(b *bulkOptions) { b.pruneProgress = fn }
}

func bulkOpts(opts []BulkOption) (bulkOptions, error) {
	var b bulkOptions
	for _, opt := range opts {
		opt(&b)
	}
	if b.batch < 0 || b.batch > 1000 {
		return b, invalidArgument("limit", "batch size must be between 1 and 1000, not %d", b.batch)
	}
	return b, nil
}

// DeleteMany deletes every terminal root instance the selection matches,
// each with its whole tree, by as many bounded calls as it takes: it
// follows the server's continuation until the server says it is complete,
// and returns the counts of all the calls. When it fails or ctx ends
// midway, what was deleted stays deleted (the returned counts say how
// much), and calling DeleteMany again goes on.
func (c *Client) DeleteMany(ctx context.Context, sel DeleteSelection, opts ...BulkOption) (DeleteCounts, error) {
	var total DeleteCounts
	b, err := bulkOpts(opts)
	if err != nil {
		return total, err
	}
	req := &orchardv1.DeleteInstancesRequest{
		InstanceIds: sel.InstanceIDs, CompletedBefore: boundTimestamp(sel.CompletedBefore), Limit: int32(b.batch), All: b.all,
	}
	if sel.Filter != nil {
		if req.Filter, err = sel.Filter.toProto("filter"); err != nil {
			return total, err
		}
	}
	if len(req.InstanceIds) == 0 && req.CompletedBefore == nil && req.Filter == nil && !b.all {
		return total, invalidArgument("selection", "set InstanceIDs, CompletedBefore or Filter, or pass AllInstances() to delete every terminal root instance")
	}
	for {
		resp, err := call(ctx, c, idempotent, c.clients.DeleteInstances, req)
		if err != nil {
			return total, err
		}
		total.add(resp.GetCounts())
		if b.deleteProgress != nil {
			b.deleteProgress(total)
		}
		if resp.GetComplete() {
			return total, nil
		}
		next := resp.GetNext()
		if next == nil {
			return total, &Error{Code: connect.CodeInternal, Message: "bulk delete: the server said it was not complete but gave no continuation"}
		}
		if resp.GetCounts().GetInstancesDeleted() == 0 && proto.Equal(next, req) {
			return total, &Error{Code: connect.CodeInternal, Message: "bulk delete: the server made no progress and asked for the same call again"}
		}
		req = next
	}
}

// Prune deletes old executions of a continue-as-new instance, never the
// current one, never a running one.
func (c *Client) Prune(ctx context.Context, instanceID string, opts PruneOptions) (PruneCounts, error) {
	var counts PruneCounts
	o, err := opts.toProto()
	if err != nil {
		return counts, err
	}
	resp, err := call(ctx, c, idempotent, c.clients.PruneExecutions, &orchardv1.PruneExecutionsRequest{InstanceId: instanceID, Options: o})
	if err != nil {
		return counts, err
	}
	counts.add(resp.GetCounts())
	return counts, nil
}

// PruneMany prunes the executions of every instance the filter matches (the
// zero Filter with AllInstances: all), by as many bounded calls as it takes,
// like DeleteMany.
func (c *Client) PruneMany(ctx context.Context, filter Filter, opts PruneOptions, bulk ...BulkOption) (PruneCounts, error) {
	var total PruneCounts
	b, err := bulkOpts(bulk)
	if err != nil {
		return total, err
	}
	o, err := opts.toProto()
	if err != nil {
		return total, err
	}
	f, err := filter.toProto("filter")
	if err != nil {
		return total, err
	}
	req := &orchardv1.PruneExecutionsBulkRequest{Filter: f, Options: o, Limit: int32(b.batch), All: b.all}
	for {
		resp, err := call(ctx, c, idempotent, c.clients.PruneExecutionsBulk, req)
		if err != nil {
			return total, err
		}
		total.add(resp.GetCounts())
		if b.pruneProgress != nil {
			b.pruneProgress(total)
		}
		if resp.GetComplete() {
			return total, nil
		}
		next := resp.GetNext()
		if next == nil {
			return total, &Error{Code: connect.CodeInternal, Message: "bulk prune: the server said it was not complete but gave no continuation"}
		}
		if resp.GetCounts().GetInstancesProcessed() == 0 && proto.Equal(next, req) {
			return total, &Error{Code: connect.CodeInternal, Message: "bulk prune: the server made no progress and asked for the same call again"}
		}
		req = next
	}
}
