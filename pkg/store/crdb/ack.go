package crdb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

// AckOrchestrationItem commits a turn in one transaction whose statements
// travel in one batch: it releases the lease by compare-and-set (and rolls
// everything back when that finds no lease), consumes the messages, appends
// history, updates the execution and the instance, starts the next execution
// on continue-as-new, creates children, enqueues messages and activity tasks,
// and deletes the tasks of cancelled activities.
func (s *Store) AckOrchestrationItem(ctx context.Context, p *store.AckOrchestrationItemParams) error {
	if err := validateAck(p); err != nil {
		return err
	}
	now := s.now()
	return s.inTx(ctx, func(tx pgx.Tx) error {
		// A fresh batch per attempt: pgx caches prepared statement
		// descriptions in the queued queries, and a failed attempt
		// deallocates them.
		b := ackBatch(p, now)
		br := tx.SendBatch(ctx, b)
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return err
		}
		if tag.RowsAffected() != 1 {
			_ = br.Close()
			return leaseLost(p.Lease)
		}
		for i := 1; i < b.Len(); i++ {
			if _, err := br.Exec(); err != nil {
				_ = br.Close()
				return fmt.Errorf("ack statement %d: %w", i+1, err)
			}
		}
		return br.Close()
	})
}

func validateAck(p *store.AckOrchestrationItemParams) error {
	if p.Lease.TenantID == "" || p.Lease.InstanceID == "" || p.Lease.Token == "" {
		return invalid("the lease is incomplete")
	}
	if p.ExecutionID <= 0 {
		return invalid("execution id must be positive")
	}
	if !p.Status.Valid() {
		return invalid("unknown status %q", p.Status)
	}
	if (p.Status == store.StatusContinuedAsNew) != (p.ContinueAsNew != nil) {
		return invalid("continue-as-new needs status ContinuedAsNew and a next execution, together")
	}
	if p.ContinueAsNew != nil && p.ContinueAsNew.Start.Kind == "" {
		return invalid("the next execution's start message has no kind")
	}
	for _, ev := range p.History {
		if ev.EventID <= 0 || ev.Kind == "" {
			return invalid("history event %d has no id or no kind", ev.EventID)
		}
	}
	for _, m := range p.Messages {
		if m.InstanceID == "" || m.Message.Kind == "" || m.Delay < 0 {
			return invalid("outgoing message without instance id or kind, or with a negative delay")
		}
	}
	for _, c := range p.Children {
		if c.InstanceID == "" || c.Name == "" || c.Start.Kind == "" || c.IfTaken.Kind == "" {
			return invalid("child start needs an instance id, a name, a start message and an if-taken message")
		}
	}
	for _, a := range p.Activities {
		if a.Name == "" || a.TaskQueue == "" || a.ActivityID <= 0 || a.Delay < 0 {
			return invalid("activity task needs an id, a name and a task queue")
		}
	}
	return nil
}

func ackBatch(p *store.AckOrchestrationItemParams, now int64) *pgx.Batch {
	tenant, instance, exec := p.Lease.TenantID, p.Lease.InstanceID, p.ExecutionID
	b := &pgx.Batch{}
	// 1. The lease, released by compare-and-set: must affect exactly one row.
	b.Queue(`DELETE FROM instance_locks
		WHERE tenant_id = $1 AND instance_id = $2 AND lock_token = $3 AND locked_until > $4`,
		tenant, instance, p.Lease.Token, now)

	if len(p.MessageIDs) > 0 {
		b.Queue(`DELETE FROM orchestrator_queue WHERE tenant_id = $1 AND instance_id = $2 AND id = ANY($3::UUID[])`,
			tenant, instance, p.MessageIDs)
	}
	if n := len(p.History); n > 0 {
		ids, kinds, payloads := make([]int64, n), make([]string, n), make([][]byte, n)
		for i, ev := range p.History {
			ids[i], kinds[i], payloads[i] = ev.EventID, ev.Kind, ev.Payload
		}
		b.Queue(`INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, payload, created_at)
			SELECT $1, $2, $3, u.event_id, u.kind, u.payload, $7
			FROM unnest($4::INT8[], $5::TEXT[], $6::BYTEA[]) AS u (event_id, kind, payload)`,
			tenant, instance, exec, ids, kinds, payloads, now)
	}

	var completedAt *int64
	if p.Status != store.StatusRunning {
		completedAt = &now
	}
	var errText *string
	if p.Error != "" {
		errText = &p.Error
	}
	b.Queue(`UPDATE executions SET status = $4, output = $5, error = $6, completed_at = $7,
			event_count = event_count + $8
		WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = $3`,
		tenant, instance, exec, string(p.Status), p.Output, errText, completedAt, len(p.History))

	if next := p.ContinueAsNew; next != nil {
		b.Queue(`
WITH e AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	VALUES ($1, $2, $3, 'Running', $4, $5)
	RETURNING execution_id
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, $2, execution_id, $6, $7, $5, $5 FROM e`,
			tenant, instance, exec+1, next.Input, now, next.Start.Kind, next.Start.Payload)
		b.Queue(`UPDATE instances SET status = 'Running', completed_at = NULL, updated_at = $3,
				current_execution_id = $4, execution_count = execution_count + 1, event_count = event_count + $5
			WHERE tenant_id = $1 AND instance_id = $2`,
			tenant, instance, now, exec+1, len(p.History))
	} else {
		var instCompletedAt *int64
		if p.Status.Terminal() {
			instCompletedAt = &now
		}
		b.Queue(`UPDATE instances SET status = $3, completed_at = $4, updated_at = $5, event_count = event_count + $6
			WHERE tenant_id = $1 AND instance_id = $2`,
			tenant, instance, string(p.Status), instCompletedAt, now, len(p.History))
	}

	if n := len(p.Messages); n > 0 {
		targets, execs, kinds, payloads, visible := make([]string, n), make([]int64, n), make([]string, n), make([][]byte, n), make([]int64, n)
		for i, m := range p.Messages {
			targets[i], execs[i], kinds[i], payloads[i] = m.InstanceID, m.ExecutionID, m.Message.Kind, m.Message.Payload
			visible[i] = now + m.Delay.Milliseconds()
		}
		b.Queue(`INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
			SELECT $1, u.instance_id, u.execution_id, u.kind, u.payload, u.visible_at, $7
			FROM unnest($2::TEXT[], $3::INT8[], $4::TEXT[], $5::BYTEA[], $6::INT8[])
				AS u (instance_id, execution_id, kind, payload, visible_at)`,
			tenant, targets, execs, kinds, payloads, visible, now)
	}

	for _, c := range p.Children {
		// The child, its first execution and its start message; or, when
		// the id is taken, the if-taken message to this instance.
		b.Queue(`
WITH i AS (
	INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		parent_instance_id, root_instance_id, created_at, updated_at, input, tags, execution_count, event_count)
	SELECT $1, $4, $5, $6, 1, 'Running', $2, root_instance_id, $7, $7, $8, $9, 1, 0
	FROM instances WHERE tenant_id = $1 AND instance_id = $2
	ON CONFLICT (tenant_id, instance_id) DO NOTHING
	RETURNING instance_id
), e AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT $1, instance_id, 1, 'Running', $8, $7 FROM i
	RETURNING instance_id
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, instance_id, 1, $10::TEXT, $11::BYTEA, $7, $7 FROM i
UNION ALL
SELECT $1, $2, $3, $12::TEXT, $13::BYTEA, $7, $7 WHERE NOT EXISTS (SELECT 1 FROM i)`,
			tenant, instance, exec, c.InstanceID, c.Name, c.Version, now, c.Input, tagsOf(c.Tags),
			c.Start.Kind, c.Start.Payload, c.IfTaken.Kind, c.IfTaken.Payload)
	}

	if n := len(p.Activities); n > 0 {
		ids, names, queues, inputs, attempts, visible := make([]int64, n), make([]string, n), make([]string, n), make([][]byte, n), make([]int64, n), make([]int64, n)
		for i, a := range p.Activities {
			ids[i], names[i], queues[i], inputs[i] = a.ActivityID, a.Name, a.TaskQueue, a.Input
			attempts[i] = int64(max(a.Attempt, 1))
			visible[i] = now + a.Delay.Milliseconds()
		}
		b.Queue(`INSERT INTO worker_queue (tenant_id, instance_id, execution_id, activity_id, name, task_queue,
				input, attempt, visible_at, created_at)
			SELECT $1, $2, $3, u.activity_id, u.name, u.task_queue, u.input, u.attempt, u.visible_at, $10
			FROM unnest($4::INT8[], $5::TEXT[], $6::TEXT[], $7::BYTEA[], $8::INT8[], $9::INT8[])
				AS u (activity_id, name, task_queue, input, attempt, visible_at)`,
			tenant, instance, exec, ids, names, queues, inputs, attempts, visible, now)
	}

	if len(p.CancelActivities) > 0 {
		b.Queue(`DELETE FROM worker_queue
			WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = $3 AND activity_id = ANY($4::INT8[])`,
			tenant, instance, exec, p.CancelActivities)
	}
	return b
}
