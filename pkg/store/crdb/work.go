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

// A leased task has visible_at = locked_until: the fetch predicate is then
// visible_at alone, and a lapsed lease makes the task visible again.
const workCandidate = `
	SELECT q.id FROM worker_queue q
	WHERE q.tenant_id = %[1]s AND q.task_queue = $1 AND q.visible_at <= $2
	ORDER BY q.visible_at
	LIMIT 1
	FOR UPDATE SKIP LOCKED`

const workClaim = `
UPDATE worker_queue SET lock_token = $3, locked_until = $4, visible_at = $4
WHERE tenant_id = %[1]s AND id = (` + workCandidate + `) AND visible_at <= $2
RETURNING tenant_id, id::TEXT, instance_id, execution_id, activity_id, name, task_queue, input, attempt, created_at`

var (
	workClaimForTenant = fmt.Sprintf(workClaim, "$5")

	// The first registered tenant after $5 (wrapping around) with a visible
	// task on this queue.
	workClaimForAnyTenant = `WITH pick AS (
	SELECT t.tenant_id FROM tenants t
	WHERE EXISTS (SELECT 1 FROM worker_queue q
		WHERE q.tenant_id = t.tenant_id AND q.task_queue = $1 AND q.visible_at <= $2)
	ORDER BY t.tenant_id <= $5, t.tenant_id
	LIMIT 1
)` + fmt.Sprintf(workClaim, "(SELECT tenant_id FROM pick)")
)

// FetchWorkItem leases the oldest visible task of a task queue.
func (s *Store) FetchWorkItem(ctx context.Context, p *store.FetchWorkItemParams) (*store.WorkItem, error) {
	if p.TaskQueue == "" {
		return nil, invalid("task queue is required")
	}
	if p.LeaseDuration <= 0 {
		return nil, invalid("lease duration must be positive")
	}
	now := s.now()
	until := now + p.LeaseDuration.Milliseconds()
	token := uuid.NewString()
	var item *store.WorkItem
	// READ COMMITTED, like the orchestration claim: the claim is a
	// compare-and-set on the row and SKIP LOCKED keeps callers apart.
	err := s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		if p.TenantID != "" {
			b.Queue(workClaimForTenant, p.TaskQueue, now, token, until, p.TenantID)
		} else {
			s.mu.Lock()
			after := s.workerTurn[p.TaskQueue]
			s.mu.Unlock()
			b.Queue(workClaimForAnyTenant, p.TaskQueue, now, token, until, after)
		}
	}, func(br pgx.BatchResults) error {
		item = nil
		w := store.WorkItem{Lease: store.WorkLease{Token: token, ExpiresAt: fromMillis(until)}}
		var attempt, createdAt int64
		err := br.QueryRow().Scan(&w.Lease.TenantID, &w.Lease.ID, &w.InstanceID, &w.ExecutionID, &w.ActivityID,
			&w.Name, &w.TaskQueue, &w.Input, &attempt, &createdAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		w.Attempt, w.CreatedAt = int(attempt), fromMillis(createdAt)
		item = &w
		return nil
	})
	if err != nil || item == nil {
		return nil, err
	}
	if p.TenantID == "" {
		s.mu.Lock()
		s.workerTurn[p.TaskQueue] = item.Lease.TenantID
		s.mu.Unlock()
	}
	return item, nil
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
		tag, err := s.pool.Exec(ctx, `UPDATE worker_queue SET locked_until = $5, visible_at = $5
			WHERE tenant_id = $1 AND id = $2 AND lock_token = $3 AND locked_until > $4`,
			p.Lease.TenantID, p.Lease.ID, p.Lease.Token, now, until)
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

// AckWorkItem deletes the task and enqueues its result in one statement: when
// the delete finds no row (the activity was cancelled, its instance deleted,
// or its lease taken over) nothing is enqueued and ErrLeaseLost is returned.
func (s *Store) AckWorkItem(ctx context.Context, p *store.AckWorkItemParams) error {
	if p.Result != nil && p.Result.Kind == "" {
		return invalid("the result message has no kind")
	}
	if !validToken(p.Lease.ID, p.Lease.Token) {
		return workLeaseLost(p.Lease)
	}
	now := s.now()
	var done bool
	// One statement, atomic at any isolation level; READ COMMITTED spares it
	// serialization failures against turns that only share index pages.
	err := s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		if p.Result == nil {
			b.Queue(`DELETE FROM worker_queue WHERE tenant_id = $1 AND id = $2 AND lock_token = $3`,
				p.Lease.TenantID, p.Lease.ID, p.Lease.Token)
			return
		}
		// The instance's lease row is written (wakeDue) before the task's
		// row is deleted, the order in which a turn that cancels the task
		// takes them: the delete's condition on the wake is evaluated once,
		// before the delete reads a row.
		b.Queue(`
WITH task AS (
	SELECT instance_id FROM worker_queue WHERE tenant_id = $1 AND id = $2 AND lock_token = $3
), `+wakeOne("(SELECT instance_id FROM task)", "$6")+`, done AS (
	DELETE FROM worker_queue WHERE tenant_id = $1 AND id = $2 AND lock_token = $3
		AND (SELECT count(*) FROM woken) >= 0
	RETURNING instance_id, execution_id
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, instance_id, execution_id, $4, $5, $6, $6 FROM done`,
			p.Lease.TenantID, p.Lease.ID, p.Lease.Token, p.Result.Kind, p.Result.Payload, now)
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
		tag, err := s.pool.Exec(ctx, `UPDATE worker_queue SET lock_token = NULL, locked_until = NULL, visible_at = $4
			WHERE tenant_id = $1 AND id = $2 AND lock_token = $3`,
			p.Lease.TenantID, p.Lease.ID, p.Lease.Token, now+p.Delay.Milliseconds())
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
