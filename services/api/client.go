package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orchardhq/orchard/internal/traceparent"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// Long polls: the default and longest waits (the protos' bounds).
const (
	defaultLongPoll = 30 * time.Second
	maxLongPoll     = 60 * time.Second
	// deadlineMargin is kept from a caller's deadline so that the answer
	// reaches it before it gives up.
	deadlineMargin = 50 * time.Millisecond
)

type clientService struct{ s *Server }

var _ orchardv1connect.ClientServiceHandler = (*clientService)(nil)

// payload checks a JSON payload field, the one way every payload the API
// takes is checked: within the tenant's size limit, and a JSON document (empty
// means null) that the engine takes as it is (valid UTF-8, not nested too
// deep), so that it is never altered nor refused later.
func payload(field string, data []byte, limits store.Limits) (json.RawMessage, error) {
	if len(data) == 0 {
		return nil, nil
	}
	if err := engine.CheckPayload(data); err != nil {
		return nil, fieldError(field, "not an acceptable JSON document: %v", err)
	}
	if err := checkPayload(limits, len(data)); err != nil {
		return nil, err
	}
	return data, nil
}

func (c *clientService) StartOrchestration(ctx context.Context, req *connect.Request[orchardv1.StartOrchestrationRequest]) (*connect.Response[orchardv1.StartOrchestrationResponse], error) {
	t := tenantOf(ctx)
	m := req.Msg
	input, err := payload("input", m.Input, t.Limits)
	if err != nil {
		return nil, err
	}
	name, version, err := c.s.versions.resolve(ctx, c.s.store, t.TenantID, m.Name, m.Version)
	if err != nil {
		return nil, err
	}
	kind, start, err := engine.EncodeMessage(engine.StartMessage{Input: input})
	if err != nil {
		return nil, err
	}
	id := m.InstanceId
	if id == "" {
		id = uuid.NewString()
	}
	maxRunning := t.Limits.Effective().MaxRunningInstances
	p := &store.StartOrchestrationParams{
		TenantID: t.TenantID, InstanceID: id, Name: name, Version: version,
		Input: input, Tags: m.Tags, Start: store.Message{Kind: kind, Payload: start}, MaxRunning: &maxRunning,
		TraceContext: traceparent.Of(ctx),
	}
	if m.Retention != nil {
		d := durationFrom(m.Retention)
		p.Retention = &store.Retention{Completed: d, Failed: d, Cancelled: d}
	}
	place := c.s.handoff.TakeIdle(t.TenantID)
	p.Eager = eagerLease(place)
	if p.Eager == nil {
		var release func()
		p.First, release = c.s.firstTurn(t.TenantID)
		defer release()
	}
	// Subscribed before the instance exists, so that no end is missed.
	ended := c.s.ends.watch(t.TenantID, id)
	res, err := c.s.store.StartOrchestration(ctx, p)
	if err == nil {
		c.s.ends.keep(t.TenantID, id, ended)
	} else {
		c.s.ends.drop(ended)
	}
	if !c.s.handOver(place, p.Eager) && !(p.First != nil && p.First.Held) && err == nil {
		c.s.notifier.Notify(ctx, notify.Topic{Kind: notify.Orchestrations, TenantID: t.TenantID})
	}
	if errors.Is(err, store.ErrTooManyRunning) {
		return nil, &tenancy.ExhaustedError{Resource: tenancy.ResourceRunningInstances, Limit: maxRunning}
	}
	if errors.Is(err, store.ErrAlreadyExists) && m.InstanceId != "" {
		// A retry of the same start answers with the instance it started.
		in, gerr := c.s.store.GetInstance(ctx, &store.GetInstanceParams{TenantID: t.TenantID, InstanceID: id})
		if gerr == nil && in.Name == name && (m.Version == "" || in.Version == version) &&
			in.CurrentExecutionID == 1 && bytes.Equal(in.Input, input) {
			return connect.NewResponse(&orchardv1.StartOrchestrationResponse{
				InstanceId: id, ExecutionId: 1, CreatedAt: timestamp(in.CreatedAt),
			}), nil
		}
		return nil, fmt.Errorf("instance %q exists with another name or input: %w", id, store.ErrAlreadyExists)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.StartOrchestrationResponse{
		InstanceId: id, ExecutionId: res.ExecutionID, CreatedAt: timestamp(res.CreatedAt),
	}), nil
}

func (c *clientService) enqueue(ctx context.Context, instanceID string, msg engine.Message) error {
	kind, body, err := engine.EncodeMessage(msg)
	if err != nil {
		return err
	}
	tenant := tenantOf(ctx).TenantID
	if _, err = c.s.store.Enqueue(ctx, &store.EnqueueParams{
		TenantID: tenant, InstanceID: instanceID, Message: store.Message{Kind: kind, Payload: body},
		TraceContext: traceparent.Of(ctx),
	}); err != nil {
		return err
	}
	c.s.notifier.Notify(ctx, notify.Topic{Kind: notify.Orchestrations, TenantID: tenant})
	return nil
}

func (c *clientService) RaiseEvent(ctx context.Context, req *connect.Request[orchardv1.RaiseEventRequest]) (*connect.Response[orchardv1.RaiseEventResponse], error) {
	data, err := payload("payload", req.Msg.Payload, tenantOf(ctx).Limits)
	if err != nil {
		return nil, err
	}
	if err := c.enqueue(ctx, req.Msg.InstanceId, engine.EventRaisedMessage{Name: req.Msg.Name, Payload: data}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.RaiseEventResponse{}), nil
}

func (c *clientService) CancelInstance(ctx context.Context, req *connect.Request[orchardv1.CancelInstanceRequest]) (*connect.Response[orchardv1.CancelInstanceResponse], error) {
	// Cancelling an ended instance does nothing, so that a retried cancel
	// of an instance that ended meanwhile succeeds.
	err := c.enqueue(ctx, req.Msg.InstanceId, engine.CancelMessage{Reason: req.Msg.Reason})
	if err != nil && !errors.Is(err, store.ErrInstanceTerminal) {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.CancelInstanceResponse{}), nil
}

func (c *clientService) getInstance(ctx context.Context, id string) (*store.Instance, error) {
	return c.s.store.GetInstance(ctx, &store.GetInstanceParams{TenantID: tenantOf(ctx).TenantID, InstanceID: id})
}

func (c *clientService) GetInstance(ctx context.Context, req *connect.Request[orchardv1.GetInstanceRequest]) (*connect.Response[orchardv1.GetInstanceResponse], error) {
	in, err := c.getInstance(ctx, req.Msg.InstanceId)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.GetInstanceResponse{Instance: instanceToProto(in)}), nil
}

// longPollDeadline is when a long poll of wait (nil: the default) must
// answer: no later than the caller's own deadline, less a margin.
func longPollDeadline(ctx context.Context, wait *durationpb.Duration) time.Time {
	d := defaultLongPoll
	if wait != nil {
		d = min(wait.AsDuration(), maxLongPoll)
	}
	deadline := time.Now().Add(d)
	if cd, ok := ctx.Deadline(); ok && cd.Add(-deadlineMargin).Before(deadline) {
		deadline = cd.Add(-deadlineMargin)
	}
	return deadline
}

// pollUntil calls try until it reports done, the deadline passes, the
// server drains or ctx ends (then ctx's error). Between calls it waits for a
// hint on wake (see package notify) or a hand-over on handed (nil: none),
// or at most a jittered wait that doubles from first to MaxPoll, since a
// hint may be lost. It reports whether try was done.
//
// A try that fails because the caller's deadline passed during it, after
// an earlier try answered, ends the poll as not done: the deadline ends a
// long poll like its own wait does, and the caller gets what the earlier
// try found rather than an error.
func (s *Server) pollUntil(ctx context.Context, deadline time.Time, wake, handed <-chan struct{}, first time.Duration, try func() (bool, error)) (bool, error) {
	waits := &backoff.ExponentialBackOff{InitialInterval: first, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: s.cfg.MaxPoll}
	s.longPolls.Add(1)
	defer s.longPolls.Add(-1)
	for tried := false; ; tried = true {
		done, err := try()
		if err != nil && tried && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return false, nil
		}
		if err != nil || done {
			return done, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		t := time.NewTimer(min(waits.NextBackOff(), left))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-s.draining:
			t.Stop()
			return false, nil
		case <-wake:
			t.Stop()
		case <-handed:
			t.Stop()
		case <-t.C:
		}
	}
}

func (c *clientService) WaitForCompletion(ctx context.Context, req *connect.Request[orchardv1.WaitForCompletionRequest]) (*connect.Response[orchardv1.WaitForCompletionResponse], error) {
	deadline := longPollDeadline(ctx, req.Msg.Timeout)
	var in *store.Instance
	tenant := tenantOf(ctx).TenantID
	// A wait for an instance this server started takes the watch its
	// start made: without a hint in it, the instance has not ended, and the
	// first read waits for the hint (or the first poll interval).
	watch := c.s.ends.take(tenant, req.Msg.InstanceId)
	unread := watch != nil
	if watch == nil {
		watch = watchEnd(c.s.notifier, c.s.handoff, tenant, req.Msg.InstanceId)
	}
	defer watch.close()
	// The end comes with a hint when hints reach the API: the polls are
	// for a lost one.
	first := c.s.cfg.MinPoll
	if c.s.cfg.Hinted {
		first = c.s.cfg.MaxPoll
	}
	read := func() (bool, error) {
		// An end handed over by this process's dispatcher is the instance
		// as a read would return it.
		if got := watch.end.Instance(); got != nil {
			in = got
			return true, nil
		}
		c.s.longPollQueries.Add(1)
		got, err := c.getInstance(ctx, req.Msg.InstanceId)
		if err != nil {
			return false, err
		}
		in = got
		return in.Status.Terminal(), nil
	}
	done, err := c.s.pollUntil(ctx, deadline, watch.sub.C, nil, first, func() (bool, error) {
		if unread {
			unread = false
			if watch.end.Instance() == nil {
				return false, nil
			}
		}
		return read()
	})
	if err == nil && in == nil {
		// The wait ended (its deadline, a drain) before any read.
		done, err = read()
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.WaitForCompletionResponse{Instance: instanceToProto(in), Done: done}), nil
}

func (c *clientService) GetHistory(ctx context.Context, req *connect.Request[orchardv1.GetHistoryRequest]) (*connect.Response[orchardv1.GetHistoryResponse], error) {
	m := req.Msg
	exec := m.ExecutionId
	if exec == 0 {
		in, err := c.getInstance(ctx, m.InstanceId)
		if err != nil {
			return nil, err
		}
		exec = in.CurrentExecutionID
	}
	size := pageSize(m.PageSize)
	events, err := c.s.store.GetHistory(ctx, &store.GetHistoryParams{
		TenantID: tenantOf(ctx).TenantID, InstanceID: m.InstanceId, ExecutionID: exec,
		AfterEventID: m.AfterEventId, Limit: size + 1,
	})
	if err != nil {
		return nil, err
	}
	resp := &orchardv1.GetHistoryResponse{ExecutionId: exec}
	if len(events) > size {
		events = events[:size]
		resp.NextAfterEventId = events[size-1].EventID
	}
	for _, e := range events {
		resp.Events = append(resp.Events, &orchardv1.HistoryEvent{
			EventId: e.EventID, Kind: e.Kind, Payload: e.Payload, CreatedAt: timestamp(e.CreatedAt),
		})
	}
	return connect.NewResponse(resp), nil
}

// pageSize applies the default page size to a validated one.
func pageSize(n int32) int {
	if n == 0 {
		return store.DefaultListLimit
	}
	return int(n)
}

func (c *clientService) ListExecutions(ctx context.Context, req *connect.Request[orchardv1.ListExecutionsRequest]) (*connect.Response[orchardv1.ListExecutionsResponse], error) {
	execs, err := c.s.store.ListExecutions(ctx, &store.ListExecutionsParams{TenantID: tenantOf(ctx).TenantID, InstanceID: req.Msg.InstanceId})
	if err != nil {
		return nil, err
	}
	if len(execs) == 0 {
		// Every instance has a current execution: none means no instance.
		if _, err := c.getInstance(ctx, req.Msg.InstanceId); err != nil {
			return nil, err
		}
	}
	resp := &orchardv1.ListExecutionsResponse{}
	for i := range execs {
		resp.Executions = append(resp.Executions, executionToProto(&execs[i]))
	}
	return connect.NewResponse(resp), nil
}

func (c *clientService) ListInstances(ctx context.Context, req *connect.Request[orchardv1.ListInstancesRequest]) (*connect.Response[orchardv1.ListInstancesResponse], error) {
	t := tenantOf(ctx)
	m := req.Msg
	const procedure = orchardv1connect.ClientServiceListInstancesProcedure
	query := queryDigest(m.GetFilter(), &orchardv1.ListInstancesRequest{Order: m.Order})
	p := &store.ListInstancesParams{
		TenantID: t.TenantID, Filter: filterFromProto(m.Filter), Order: orderFromProto[m.Order], Limit: pageSize(m.PageSize),
	}
	if m.PageToken != "" {
		tok, err := c.s.tokens.openPage(procedure, t.TenantID, m.PageToken, query)
		if err != nil {
			return nil, err
		}
		p.After = &store.InstancePosition{OrderKey: tok.At, InstanceID: tok.ID}
	}
	res, err := c.s.store.ListInstances(ctx, p)
	if err != nil {
		return nil, err
	}
	resp := &orchardv1.ListInstancesResponse{}
	for i := range res.Instances {
		resp.Instances = append(resp.Instances, instanceToProto(&res.Instances[i]))
	}
	if next := res.Next; next != nil {
		if resp.NextPageToken, err = c.s.tokens.sealPage(procedure, t.TenantID, pageToken{Query: query, At: next.OrderKey, ID: next.InstanceID}); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(resp), nil
}

func (c *clientService) CountInstances(ctx context.Context, req *connect.Request[orchardv1.CountInstancesRequest]) (*connect.Response[orchardv1.CountInstancesResponse], error) {
	res, err := c.s.store.CountInstances(ctx, &store.CountInstancesParams{TenantID: tenantOf(ctx).TenantID, Filter: filterFromProto(req.Msg.Filter)})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.CountInstancesResponse{Total: res.Total, ByStatus: statusCounts(res.ByStatus)}), nil
}

func (c *clientService) GetInstanceTree(ctx context.Context, req *connect.Request[orchardv1.GetInstanceTreeRequest]) (*connect.Response[orchardv1.GetInstanceTreeResponse], error) {
	tree, err := c.s.store.GetInstanceTree(ctx, &store.GetInstanceTreeParams{TenantID: tenantOf(ctx).TenantID, InstanceID: req.Msg.InstanceId})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.GetInstanceTreeResponse{RootInstanceId: tree.RootID, InstanceIds: tree.IDs}), nil
}

func (c *clientService) DeleteInstance(ctx context.Context, req *connect.Request[orchardv1.DeleteInstanceRequest]) (*connect.Response[orchardv1.DeleteInstanceResponse], error) {
	m := req.Msg
	if m.Graceful {
		if m.Force {
			return nil, fieldError("force", "a graceful delete cancels what runs: it does not take force")
		}
		if _, err := c.getInstance(ctx, m.InstanceId); err != nil {
			return nil, err
		}
		op, err := c.startGracefulDelete(ctx, []string{m.InstanceId}, cmp.Or(m.GracefulTimeout.AsDuration(), defaultGracefulTimeout))
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&orchardv1.DeleteInstanceResponse{OperationId: op}), nil
	}
	var res *store.DeleteResult
	err := c.s.audited(ctx, store.AuditDeleteInstance, m, func(record string) (bool, error) {
		var err error
		res, err = c.s.store.DeleteInstance(ctx, &store.DeleteInstanceParams{
			TenantID: tenantOf(ctx).TenantID, InstanceID: m.InstanceId, Force: m.Force, Audit: record,
		})
		return err == nil, err
	})
	if err != nil {
		return nil, err
	}
	if res.InstancesDeleted == 0 {
		return nil, fmt.Errorf("instance %q: %w", m.InstanceId, store.ErrNotFound)
	}
	return connect.NewResponse(&orchardv1.DeleteInstanceResponse{Counts: deleteCounts(*res)}), nil
}

// requireAll checks the all field of a destructive bulk request against its
// criteria as parsed: with none (an empty filter, or one whose only values
// were unknown), the request must say all, so that it never widens to
// everything by omission; with some, it must not.
func requireAll(noCriterion, all bool, everything string) error {
	switch {
	case noCriterion && !all:
		return fieldError("all", "the request sets no criterion; set all to act on %s", everything)
	case !noCriterion && all:
		return fieldError("all", "all acts on %s and excludes every other criterion", everything)
	}
	return nil
}

// bulkFilter ANDs a bulk request's own criteria into its filter.
func bulkFilter(f *orchardv1.InstanceFilter, ids []string, completedBefore *timestamppb.Timestamp) store.InstanceFilter {
	out := filterFromProto(f)
	if len(ids) > 0 {
		if out.InstanceIDs == nil {
			out.InstanceIDs = ids
		} else {
			want := map[string]bool{}
			for _, id := range ids {
				want[id] = true
			}
			both := []string{}
			for _, id := range out.InstanceIDs {
				if want[id] {
					both = append(both, id)
				}
			}
			out.InstanceIDs = both
		}
	}
	if cb := boundFromTimestamp(completedBefore); cb != nil && (out.CompletedBefore == nil || cb.Before(*out.CompletedBefore)) {
		out.CompletedBefore = cb
	}
	return out
}

func (c *clientService) DeleteInstances(ctx context.Context, req *connect.Request[orchardv1.DeleteInstancesRequest]) (*connect.Response[orchardv1.DeleteInstancesResponse], error) {
	m := req.Msg
	filter := bulkFilter(m.Filter, m.InstanceIds, m.CompletedBefore)
	// Every bulk delete takes root instances only: roots_only alone selects
	// everything as well.
	criteria := filter
	criteria.RootsOnly = false
	if err := requireAll(criteria.Empty(), m.All, "every terminal root instance"); err != nil {
		return nil, err
	}
	if filter.InstanceIDs != nil && len(filter.InstanceIDs) == 0 {
		// instance_ids and filter.instance_ids have nothing in common.
		return connect.NewResponse(&orchardv1.DeleteInstancesResponse{Counts: &orchardv1.DeleteCounts{}, Complete: true}), nil
	}
	if m.Graceful {
		if m.Filter != nil || m.CompletedBefore != nil || len(m.InstanceIds) == 0 {
			return nil, fieldError("graceful", "a graceful delete takes instance_ids only (no filter, no completed_before): list the instances first")
		}
		op, err := c.startGracefulDelete(ctx, m.InstanceIds, cmp.Or(m.GracefulTimeout.AsDuration(), defaultGracefulTimeout))
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&orchardv1.DeleteInstancesResponse{Counts: &orchardv1.DeleteCounts{}, OperationId: op}), nil
	}
	var res *store.BulkDeleteResult
	err := c.s.audited(ctx, store.AuditDeleteInstances, m, func(record string) (bool, error) {
		var err error
		res, err = c.s.store.DeleteInstanceBulk(ctx, &store.DeleteInstanceBulkParams{
			TenantID: tenantOf(ctx).TenantID, Filter: filter, Limit: int(m.Limit), Audit: record,
		})
		return res != nil && res.Complete, err
	})
	if err != nil {
		return nil, err
	}
	resp := &orchardv1.DeleteInstancesResponse{Counts: deleteCounts(res.DeleteResult), Complete: res.Complete}
	if !res.Complete {
		resp.Next = proto.CloneOf(m)
	}
	return connect.NewResponse(resp), nil
}

func (c *clientService) PruneExecutions(ctx context.Context, req *connect.Request[orchardv1.PruneExecutionsRequest]) (*connect.Response[orchardv1.PruneExecutionsResponse], error) {
	var res *store.PruneResult
	err := c.s.audited(ctx, store.AuditPruneExecutions, req.Msg, func(record string) (bool, error) {
		var err error
		res, err = c.s.store.PruneExecutions(ctx, &store.PruneExecutionsParams{
			TenantID: tenantOf(ctx).TenantID, InstanceID: req.Msg.InstanceId, Options: pruneOptions(req.Msg.Options), Audit: record,
		})
		return err == nil, err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.PruneExecutionsResponse{Counts: pruneCounts(*res)}), nil
}

func (c *clientService) PruneExecutionsBulk(ctx context.Context, req *connect.Request[orchardv1.PruneExecutionsBulkRequest]) (*connect.Response[orchardv1.PruneExecutionsBulkResponse], error) {
	m := req.Msg
	filter := filterFromProto(m.Filter)
	if err := requireAll(filter.Empty(), m.All, "every instance"); err != nil {
		return nil, err
	}
	var res *store.BulkPruneResult
	err := c.s.audited(ctx, store.AuditPruneBulk, m, func(record string) (bool, error) {
		var err error
		res, err = c.s.store.PruneExecutionsBulk(ctx, &store.PruneExecutionsBulkParams{
			TenantID: tenantOf(ctx).TenantID, Filter: filter, Options: pruneOptions(m.Options), Limit: int(m.Limit), Audit: record,
		})
		return res != nil && res.Complete, err
	})
	if err != nil {
		return nil, err
	}
	resp := &orchardv1.PruneExecutionsBulkResponse{Counts: pruneCounts(res.PruneResult), Complete: res.Complete}
	if !res.Complete {
		resp.Next = proto.CloneOf(m)
	}
	return connect.NewResponse(resp), nil
}
