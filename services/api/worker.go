package api

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	"github.com/orchardhq/orchard/internal/traceparent"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

const defaultTaskLease = 30 * time.Second

type workerService struct{ s *Server }

var _ orchardv1connect.WorkerServiceHandler = (*workerService)(nil)

func (w *workerService) PollActivityTask(ctx context.Context, req *connect.Request[orchardv1.PollActivityTaskRequest]) (*connect.Response[orchardv1.PollActivityTaskResponse], error) {
	t := tenantOf(ctx)
	m := req.Msg
	lease := defaultTaskLease
	if m.LeaseDuration != nil {
		lease = m.LeaseDuration.AsDuration()
	}
	deadline := longPollDeadline(ctx, m.Wait)
	var items []*store.WorkItem
	sub := w.s.notifier.Subscribe(notify.Topic{Kind: notify.Tasks, TenantID: t.TenantID, Key: m.TaskQueue})
	defer sub.Close()
	// Between its queries the poll offers its place to the acks of this
	// process's dispatcher: one that schedules a task for this queue
	// inserts it leased to the poll and hands it over (notify.Handoff).
	handed := w.s.handoff.Wait(t.TenantID, m.TaskQueue, lease, max(int(m.GetMaxTasks()), 1))
	// Whatever the first query that finds tasks leases, or the first
	// hand-over, is the answer: a poll does not wait to fill its batch.
	// A poll that starts while its queue is known empty (Quiet) waits
	// before its first query.
	started := false
	_, err := w.s.pollUntil(ctx, deadline, sub.C, handed.Done(), w.s.cfg.MinPoll, func() (bool, error) {
		got, pending := handed.Withdraw()
		if items = got; len(items) > 0 || pending {
			return len(items) > 0, nil
		}
		if !started && handed.Quiet() {
			started = true
			handed.Offer()
			return false, nil
		}
		started = true
		w.s.longPollQueries.Add(1)
		handed.BeforeQuery()
		var err error
		items, err = w.s.store.FetchWorkItems(ctx, &store.FetchWorkItemsParams{
			TenantID: t.TenantID, TaskQueue: m.TaskQueue, LeaseDuration: lease, Max: int(m.GetMaxTasks()),
		})
		if err == nil && len(items) < max(int(m.GetMaxTasks()), 1) {
			handed.QueriedEmpty()
		}
		if err == nil && len(items) == 0 {
			handed.Offer()
		}
		return len(items) > 0, err
	})
	// Tasks handed over as the poll ended are its answer too (a poll that
	// found tasks by its query had withdrawn its place before it).
	if left := handed.Leave(); len(left) > 0 {
		items = left
	}
	if err != nil && len(items) == 0 {
		return nil, err
	}
	if len(items) == 0 {
		return connect.NewResponse(&orchardv1.PollActivityTaskResponse{}), nil
	}
	if ctx.Err() != nil {
		// The worker went away as the tasks were leased: hand them back
		// now rather than when their leases lapse.
		w.release(ctx, items)
		return nil, ctx.Err()
	}
	res := &orchardv1.PollActivityTaskResponse{Tasks: make([]*orchardv1.ActivityTask, len(items))}
	for i, item := range items {
		token, err := w.s.tokens.sealTask(t.TenantID, &taskToken{
			ID: item.Lease.ID, Lock: item.Lease.Token, InstanceID: item.InstanceID, ExecutionID: item.ExecutionID,
			ActivityID: item.ActivityID, Attempt: item.Attempt, LeaseMillis: lease.Milliseconds(),
		})
		if err != nil {
			w.release(ctx, items)
			return nil, err
		}
		res.Tasks[i] = &orchardv1.ActivityTask{
			TaskToken:      token,
			InstanceId:     item.InstanceID,
			ExecutionId:    item.ExecutionID,
			ActivityId:     item.ActivityID,
			Name:           item.Name,
			TaskQueue:      item.TaskQueue,
			Input:          item.Input,
			Attempt:        int32(item.Attempt),
			LeaseExpiresAt: timestamp(item.Lease.ExpiresAt),
			CreatedAt:      timestamp(item.CreatedAt),
			Traceparent:    item.TraceContext,
		}
		if m.WorkerIdentity != "" {
			w.s.log.DebugContext(ctx, "api: task leased", slog.String("tenant", t.TenantID), slog.String("instance", item.InstanceID),
				slog.Int64("activity", item.ActivityID), slog.String("worker", m.WorkerIdentity))
		}
	}
	if m.MaxTasks == nil {
		// A worker that predates max_tasks reads the one task here.
		//lint:ignore SA1019 the field is kept for such workers
		res.Task = res.Tasks[0]
	}
	return connect.NewResponse(res), nil
}

// release hands leased tasks back at once, for a worker that will not get
// them.
func (w *workerService) release(ctx context.Context, items []*store.WorkItem) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	released := 0
	for _, item := range items {
		if err := w.s.store.AbandonWorkItem(rctx, &store.AbandonWorkItemParams{Lease: item.Lease}); err != nil {
			w.s.log.WarnContext(ctx, "api: could not release a task leased for a worker that went away",
				slog.String("tenant", item.Lease.TenantID), slog.Any("error", err))
			continue
		}
		released++
		w.s.handoff.Unplaced(item.Lease.TenantID, item.TaskQueue)
	}
	// One hint per task, as for tasks scheduled.
	topic := notify.Topic{Kind: notify.Tasks, TenantID: items[0].Lease.TenantID, Key: items[0].TaskQueue}
	w.s.notifier.Notify(rctx, slices.Repeat([]notify.Topic{topic}, released)...)
}

// lease opens a task token of the calling tenant.
func (w *workerService) lease(ctx context.Context, token string) (*taskToken, store.WorkLease, error) {
	tenant := tenantOf(ctx).TenantID
	tok, err := w.s.tokens.openTask(tenant, token)
	if err != nil {
		return nil, store.WorkLease{}, err
	}
	return tok, store.WorkLease{TenantID: tenant, ID: tok.ID, Token: tok.Lock}, nil
}

func (w *workerService) HeartbeatActivityTask(ctx context.Context, req *connect.Request[orchardv1.HeartbeatActivityTaskRequest]) (*connect.Response[orchardv1.HeartbeatActivityTaskResponse], error) {
	tok, lease, err := w.lease(ctx, req.Msg.TaskToken)
	if err != nil {
		return nil, err
	}
	d := tok.lease()
	if req.Msg.LeaseDuration != nil {
		d = req.Msg.LeaseDuration.AsDuration()
	}
	until, err := w.s.store.RenewWorkItemLease(ctx, &store.RenewWorkItemLeaseParams{Lease: lease, Duration: d})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.HeartbeatActivityTaskResponse{LeaseExpiresAt: timestamp(until)}), nil
}

// ack completes a task with msg, its result for its instance. With an idle
// loop's place, the instance's next turn runs in the write, before it when
// the loop's dispatcher still has the instance as its last ack left it
// (store.EagerLease.Ahead).
func (w *workerService) ack(ctx context.Context, tok *taskToken, lease store.WorkLease, msg engine.Message) error {
	kind, body, err := engine.EncodeMessage(msg)
	if err != nil {
		return err
	}
	place := w.s.handoff.TakeIdle(lease.TenantID)
	p := &store.AckWorkItemParams{Lease: lease, Result: &store.Message{Kind: kind, Payload: body},
		TraceContext: traceparent.Of(ctx), Eager: eagerLease(place)}
	if e := p.Eager; e != nil {
		e.Ahead = e.Hold.Ahead(lease.TenantID, tok.InstanceID, tok.ExecutionID)
	} else {
		var release func()
		p.Next, release = w.s.nextTurn(lease.TenantID, tok)
		defer release()
	}
	err = w.s.store.AckWorkItem(ctx, p)
	if !w.s.handOver(place, p.Eager) && !(p.Next != nil && p.Next.Held) && err == nil {
		w.s.notifier.Notify(ctx, notify.Topic{Kind: notify.Orchestrations, TenantID: lease.TenantID})
	}
	return err
}

// eagerLease asks a write that makes an instance due to lease it and run
// its turn in its own transaction, in the place of the idle dispatcher
// loop whose place the API took (eager start and completion, see
// notify.Handoff); nil without a place.
func eagerLease(place *notify.LoopPlace) *store.EagerLease {
	hold := place.Hold()
	if hold == nil {
		return nil
	}
	return &store.EagerLease{Token: uuid.NewString(), Duration: place.Lease(), Hold: hold}
}

// firstTurn asks a start that found no idle loop to run its first turn
// before its batched write, in the dispatcher of this process that serves
// the tenant (store.StartOrchestrationParams.First); nil when none does
// (or it holds its most). release is called once the start returned.
func (s *Server) firstTurn(tenant string) (first *store.EagerLease, release func()) {
	hold, lease, release := s.handoff.Holder(tenant)
	if hold == nil {
		return nil, func() {}
	}
	return &store.EagerLease{Token: uuid.NewString(), Duration: lease, Hold: hold}, release
}

// nextTurn asks a completion that found no idle loop to run its
// instance's next turn before its write, when the dispatcher of this
// process that serves the tenant has the instance as its last ack left it
// (store.AckWorkItemParams.Next); nil otherwise. release is called once
// the completion returned.
func (s *Server) nextTurn(tenant string, tok *taskToken) (next *store.EagerLease, release func()) {
	e, release := s.firstTurn(tenant)
	if e == nil {
		return nil, release
	}
	if e.Ahead = e.Hold.Ahead(tenant, tok.InstanceID, tok.ExecutionID); e.Ahead == nil {
		release()
		return nil, func() {}
	}
	return e, release
}

// handOver gives back the loop's place in which the write ran the turn
// (e.Held), and says whether it did: then no hint is needed. A write that
// ran no turn (it leased nothing, or failed) wakes the loop instead, to
// fetch.
func (s *Server) handOver(place *notify.LoopPlace, e *store.EagerLease) bool {
	if place == nil {
		return false
	}
	if e != nil && e.Held {
		place.Return()
		return true
	}
	place.Deliver(nil)
	return false
}

func (w *workerService) CompleteActivityTask(ctx context.Context, req *connect.Request[orchardv1.CompleteActivityTaskRequest]) (*connect.Response[orchardv1.CompleteActivityTaskResponse], error) {
	tok, lease, err := w.lease(ctx, req.Msg.TaskToken)
	if err != nil {
		return nil, err
	}
	result, err := payload("result", req.Msg.Result, tenantOf(ctx).Limits)
	if err != nil {
		return nil, err
	}
	err = w.ack(ctx, tok, lease, engine.ActivityCompletedMessage{
		ExecutionID: tok.ExecutionID, ActivityID: tok.ActivityID, Attempt: tok.Attempt, Result: result,
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.CompleteActivityTaskResponse{}), nil
}

// failureKind is the kind of a failure a worker reports without one.
const failureKind = "activity_failed"

func (w *workerService) FailActivityTask(ctx context.Context, req *connect.Request[orchardv1.FailActivityTaskRequest]) (*connect.Response[orchardv1.FailActivityTaskResponse], error) {
	tok, lease, err := w.lease(ctx, req.Msg.TaskToken)
	if err != nil {
		return nil, err
	}
	f := req.Msg.Failure
	if _, err := payload("failure.details", f.Details, tenantOf(ctx).Limits); err != nil {
		return nil, err
	}
	kind := f.Kind
	if kind == "" {
		kind = failureKind
	}
	err = w.ack(ctx, tok, lease, engine.ActivityFailedMessage{
		ExecutionID: tok.ExecutionID, ActivityID: tok.ActivityID, Attempt: tok.Attempt,
		Failure: engine.Failure{Kind: kind, Message: f.Message, NonRetryable: !req.Msg.Retryable},
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.FailActivityTaskResponse{}), nil
}
