package crdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

var (
	sqlClaimWorkForTenant    = stmt("ClaimWorkForTenant")
	sqlClaimWorkForAnyTenant = stmt("ClaimWorkForAnyTenant")
	sqlRenewWork             = stmt("RenewWork")
	sqlAckWork               = stmt("AckWork")
	sqlAckWorkWithResult     = stmt("AckWorkWithResult")
	sqlAheadFits             = stmt("AheadFits")
	sqlAbandonWork           = stmt("AbandonWork")
)

// FetchWorkItems leases up to Max of the oldest visible tasks of a task
// queue in one statement.
func (s *Store) FetchWorkItems(ctx context.Context, p *store.FetchWorkItemsParams) ([]*store.WorkItem, error) {
	if p.TaskQueue == "" {
		return nil, invalid("task queue is required")
	}
	if p.LeaseDuration <= 0 {
		return nil, invalid("lease duration must be positive")
	}
	max, err := fetchMax(p.Max)
	if err != nil {
		return nil, err
	}
	now := s.now()
	until := now + p.LeaseDuration.Milliseconds()
	token := uuid.NewString()
	var items []*store.WorkItem
	// READ COMMITTED, like the orchestration claim: the claim is a
	// compare-and-set on the rows and SKIP LOCKED keeps callers apart.
	err = s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		args := namedArgs{"task_queue": p.TaskQueue, "now": now, "token": token, "until": until, "max": max}
		if p.TenantID != "" {
			args["tenant_id"] = p.TenantID
			b.Queue(sqlClaimWorkForTenant, args)
		} else {
			s.mu.Lock()
			args["after"] = s.workerTurn[p.TaskQueue]
			s.mu.Unlock()
			b.Queue(sqlClaimWorkForAnyTenant, args)
		}
	}, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		items, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.WorkItem, error) {
			w := &store.WorkItem{Lease: store.WorkLease{Token: token, ExpiresAt: fromMillis(until)}}
			var attempt, createdAt int64
			err := r.Scan(&w.Lease.TenantID, &w.Lease.ID, &w.InstanceID, &w.ExecutionID, &w.ActivityID,
				&w.Name, &w.TaskQueue, &w.Input, &attempt, &createdAt, &w.TraceContext)
			w.Attempt, w.CreatedAt = int(attempt), fromMillis(createdAt)
			return w, err
		})
		return err
	})
	if err != nil || len(items) == 0 {
		return nil, err
	}
	if p.TenantID == "" {
		s.mu.Lock()
		s.workerTurn[p.TaskQueue] = items[0].Lease.TenantID
		s.mu.Unlock()
	}
	return items, nil
}

func workLeaseLost(l store.WorkLease) error {
	return fmt.Errorf("activity task %s: %w", l.ID, store.ErrLeaseLost)
}

// RenewWorkItemLease extends a live task lease by compare-and-set. It fails
// once the task row is gone: that is how a worker learns of cancellation.
func (s *Store) RenewWorkItemLease(ctx context.Context, p *store.RenewWorkItemLeaseParams) (time.Time, error) {
	if p.Duration <= 0 {
		return time.Time{}, invalid("lease duration must be positive")
	}
	if !validToken(p.Lease.ID, p.Lease.Token) {
		return time.Time{}, workLeaseLost(p.Lease)
	}
	now := s.now()
	until := now + p.Duration.Milliseconds()
	var renewed bool
	err := s.retry(ctx, func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, sqlRenewWork, namedArgs{
			"tenant_id": p.Lease.TenantID, "id": p.Lease.ID, "token": p.Lease.Token, "now": now, "until": until})
		renewed = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	if !renewed {
		return time.Time{}, workLeaseLost(p.Lease)
	}
	return fromMillis(until), nil
}

// AckWorkItem deletes the task and enqueues its result in one statement
// (with the tenant's other completions that came meanwhile, unless an idle
// loop holds its instance's turn: completeBatched): when the delete finds no
// row (the activity was cancelled, its instance deleted, or its lease taken
// over) nothing is enqueued and ErrLeaseLost is returned.
func (s *Store) AckWorkItem(ctx context.Context, p *store.AckWorkItemParams) error {
	if p.Result != nil && p.Result.Kind == "" {
		return invalid("the result message has no kind")
	}
	if err := checkTraceContext(p.TraceContext); err != nil {
		return err
	}
	if !validToken(p.Lease.ID, p.Lease.Token) {
		return workLeaseLost(p.Lease)
	}
	var done bool
	if p.Result == nil {
		err := s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
			b.Queue(sqlAckWork, namedArgs{"tenant_id": p.Lease.TenantID, "id": p.Lease.ID, "token": p.Lease.Token})
		}, func(br pgx.BatchResults) error {
			tag, err := br.Exec()
			done = tag.RowsAffected() == 1
			return err
		})
		if err != nil {
			return err
		}
		if !done {
			return workLeaseLost(p.Lease)
		}
		return nil
	}
	now := s.now()
	until, err := eagerLease(p.Eager, now)
	if err != nil {
		return err
	}
	again := true
	if e := p.Eager; e != nil {
		messageID := uuid.NewString()
		write := func(b *pgx.Batch) {
			b.Queue(sqlAckWorkWithResult, namedArgs{"tenant_id": p.Lease.TenantID, "id": p.Lease.ID, "token": p.Lease.Token,
				"kind": p.Result.Kind, "payload": p.Result.Payload, "now": now, "trace_context": p.TraceContext,
				"message_id": messageID, "lease_token": e.Token, "leased_until": until})
		}
		read := func(br pgx.BatchResults) (bool, error) {
			tag, err := br.Exec()
			return tag.RowsAffected() == 1, err
		}
		if a := e.Ahead; a != nil && a.Instance.TenantID == p.Lease.TenantID {
			in := a.Instance
			done, again, err = s.heldBefore(ctx, e, e.Hold.Turn(ctx, aheadItem(p, messageID, now, until)), func(b *pgx.Batch) {
				write(b)
				b.Queue(sqlAheadFits, namedArgs{"tenant_id": in.TenantID, "instance_id": in.InstanceID,
					"execution_id": in.CurrentExecutionID, "updated_at": in.UpdatedAt.UnixMilli(), "event_count": in.EventCount,
					"execution_count": in.ExecutionCount, "message_id": messageID, "lease_token": e.Token, "now": now})
			}, func(br pgx.BatchResults) (done, held bool, err error) {
				if done, err = read(br); err != nil {
					return false, false, err
				}
				// No row: the write leased nothing.
				if err = br.QueryRow().Scan(&held); errors.Is(err, pgx.ErrNoRows) {
					err = nil
				}
				return done, held, err
			})
		} else {
			done, again, err = s.heldWrite(ctx, e, now, until, write, read)
		}
		if err != nil {
			return err
		}
	}
	if e := p.Next; again && e != nil && p.Eager == nil && e.Ahead != nil && e.Ahead.Instance.TenantID == p.Lease.TenantID {
		if until, err = eagerLease(e, now); err != nil {
			return err
		}
		item := nextItem(p, e, uuid.NewString(), now, until)
		ack := e.Hold.Turn(ctx, item)
		var folded bool
		if foldsNext(ack, item) {
			done, folded, err = s.completeBatched(ctx, p, item, ack)
		} else {
			done, _, err = s.completeBatched(ctx, p, nil, nil)
		}
		written(ctx, e, folded)
		if err != nil {
			return err
		}
		again = false
	}
	if again {
		if done, _, err = s.completeBatched(ctx, p, nil, nil); err != nil {
			return err
		}
	}
	if !done {
		return workLeaseLost(p.Lease)
	}
	return nil
}

// aheadItem is the item of the turn an eager completion runs before its
// write (store.EagerLease.Ahead): Ahead's, leased under the eager token
// until until, with the completion's result, of id messageID, as its one
// message, and no retention read.
func aheadItem(p *store.AckWorkItemParams, messageID string, now, until int64) *store.OrchestrationItem {
	return nextItem(p, p.Eager, messageID, now, until)
}

// nextItem is aheadItem for e, the Eager or Next of p.
func nextItem(p *store.AckWorkItemParams, e *store.EagerLease, messageID string, now, until int64) *store.OrchestrationItem {
	it := *e.Ahead
	in, at := it.Instance, fromMillis(now)
	it.Lease = store.OrchestrationLease{TenantID: in.TenantID, InstanceID: in.InstanceID, Token: e.Token, ExpiresAt: fromMillis(until)}
	it.Messages = []store.QueuedMessage{{ID: messageID, InstanceID: in.InstanceID, ExecutionID: in.CurrentExecutionID,
		Message: *p.Result, VisibleAt: at, CreatedAt: at, TraceContext: p.TraceContext}}
	it.Claims, it.Strikes = 1, 0
	it.Retention, it.RetentionUnread = store.Retention{}, true
	return &it
}

// AbandonWorkItem releases a task; it becomes visible again after Delay.
func (s *Store) AbandonWorkItem(ctx context.Context, p *store.AbandonWorkItemParams) error {
	if p.Delay < 0 {
		return invalid("negative delay %s", p.Delay)
	}
	if !validToken(p.Lease.ID, p.Lease.Token) {
		return workLeaseLost(p.Lease)
	}
	now := s.now()
	var released bool
	err := s.retry(ctx, func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, sqlAbandonWork, namedArgs{
			"tenant_id": p.Lease.TenantID, "id": p.Lease.ID, "token": p.Lease.Token, "visible_at": now + p.Delay.Milliseconds()})
		released = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return err
	}
	if !released {
		return workLeaseLost(p.Lease)
	}
	return nil
}
