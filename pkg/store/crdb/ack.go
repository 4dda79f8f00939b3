package crdb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

// AckOrchestrationItem commits a turn in one transaction that travels in one
// round trip. The turn's correctness rests on the lease, not on the
// isolation level: every statement first pins the lease row (held by this
// token and not expired) for the rest of the transaction and writes only if
// it found it, and the last statement releases it, consumes the messages,
// appends history, updates the execution and the instance, and reports
// whether the lease was there. Either the lease was held and everything is
// written, or it was not and nothing is.
//
// It runs READ COMMITTED: under SERIALIZABLE, PostgreSQL's predicate locks
// (taken on whole index pages) make concurrent turns of neighbouring
// instances abort each other constantly, though they share no row. A
// concurrent delete or prune, which are SERIALIZABLE, still conflicts with
// the turn on the lease row and its instance's rows, so one of them retries.
func (s *Store) AckOrchestrationItem(ctx context.Context, p *store.AckOrchestrationItemParams) error {
	if err := validateAck(p); err != nil {
		return err
	}
	now := s.now()
	statements := ackStatements(p)
	var released int64
	err := s.inBatchTx(ctx, pgx.ReadCommitted,
		func(b *pgx.Batch) { queueAck(b, p, now) },
		func(br pgx.BatchResults) error {
			for i := range statements - 1 {
				if _, err := br.Exec(); err != nil {
					return fmt.Errorf("ack statement %d: %w", i+1, err)
				}
			}
			return br.QueryRow().Scan(&released)
		})
	if err != nil {
		return err
	}
	if released != 1 {
		return leaseLost(p.Lease)
	}
	return nil
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

// pinLease opens every statement of an ack but the last: it finds the lease
// (held by this token, not expired) and locks its row until the transaction
// ends, so that no claim's compare-and-set and no delete can change it under
// the statements that follow. The statement's writes are conditioned on
// leaseHeld. $1..$4 are always tenant, instance, lock token and now.
const (
	pinLease = `lease AS (
	SELECT 1 FROM instance_locks
	WHERE tenant_id = $1 AND instance_id = $2 AND lock_token = $3 AND locked_until > $4
	FOR UPDATE
)`
	leaseHeld = `EXISTS (SELECT 1 FROM lease)`
)

// ackStatements is the number of statements queueAck queues.
func ackStatements(p *store.AckOrchestrationItemParams) int {
	n := 1 + len(p.Children)
	if p.ContinueAsNew != nil {
		n++
	}
	if len(p.Messages) > 0 || len(p.Activities) > 0 {
		n++
	}
	if len(p.CancelActivities) > 0 {
		n++
	}
	return n
}

func queueAck(b *pgx.Batch, p *store.AckOrchestrationItemParams, now int64) {
	tenant, instance, token, exec := p.Lease.TenantID, p.Lease.InstanceID, p.Lease.Token, p.ExecutionID

	if next := p.ContinueAsNew; next != nil {
		b.Queue(`
WITH `+pinLease+`, e AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT $1, $2, $5, 'Running', $6, $4 WHERE `+leaseHeld+`
	RETURNING execution_id
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, $2, execution_id, $7, $8, $4, $4 FROM e`,
			tenant, instance, token, now, exec+1, next.Input, next.Start.Kind, next.Start.Payload)
	}

	if len(p.Messages) > 0 || len(p.Activities) > 0 {
		n := len(p.Messages)
		targets, execs, kinds, payloads, visible := make([]string, n), make([]int64, n), make([]string, n), make([][]byte, n), make([]int64, n)
		for i, m := range p.Messages {
			targets[i], execs[i], kinds[i], payloads[i] = m.InstanceID, m.ExecutionID, m.Message.Kind, m.Message.Payload
			visible[i] = now + m.Delay.Milliseconds()
		}
		k := len(p.Activities)
		ids, names, queues, inputs, attempts, taskVisible := make([]int64, k), make([]string, k), make([]string, k), make([][]byte, k), make([]int64, k), make([]int64, k)
		for i, a := range p.Activities {
			ids[i], names[i], queues[i], inputs[i] = a.ActivityID, a.Name, a.TaskQueue, a.Input
			attempts[i] = int64(max(a.Attempt, 1))
			taskVisible[i] = now + a.Delay.Milliseconds()
		}
		b.Queue(`
WITH `+pinLease+`, tasks AS (
	INSERT INTO worker_queue (tenant_id, instance_id, execution_id, activity_id, name, task_queue,
		input, attempt, visible_at, created_at)
	SELECT $1, $2, $5, u.activity_id, u.name, u.task_queue, u.input, u.attempt, u.visible_at, $4
	FROM unnest($6::INT8[], $7::TEXT[], $8::TEXT[], $9::BYTEA[], $10::INT8[], $11::INT8[])
		AS u (activity_id, name, task_queue, input, attempt, visible_at)
	WHERE `+leaseHeld+`
	RETURNING 1
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, u.instance_id, u.execution_id, u.kind, u.payload, u.visible_at, $4
FROM unnest($12::TEXT[], $13::INT8[], $14::TEXT[], $15::BYTEA[], $16::INT8[])
	AS u (instance_id, execution_id, kind, payload, visible_at)
WHERE `+leaseHeld,
			tenant, instance, token, now, exec,
			ids, names, queues, inputs, attempts, taskVisible,
			targets, execs, kinds, payloads, visible)
	}

	if len(p.CancelActivities) > 0 {
		b.Queue(`WITH `+pinLease+`
DELETE FROM worker_queue
WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = $5 AND activity_id = ANY($6::INT8[])
	AND `+leaseHeld,
			tenant, instance, token, now, exec, p.CancelActivities)
	}

	for _, c := range p.Children {
		// The child, its first execution and its start message; or, when
		// the id is taken, the if-taken message to this instance.
		b.Queue(`
WITH `+pinLease+`, i AS (
	INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		parent_instance_id, root_instance_id, created_at, updated_at, input, tags, execution_count, event_count)
	SELECT $1, $6, $7, $8, 1, 'Running', $2, root_instance_id, $4, $4, $9, $10, 1, 0
	FROM instances WHERE tenant_id = $1 AND instance_id = $2 AND `+leaseHeld+`
	ON CONFLICT (tenant_id, instance_id) DO NOTHING
	RETURNING instance_id
), e AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT $1, instance_id, 1, 'Running', $9, $4 FROM i
	RETURNING instance_id
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, instance_id, 1, $11::TEXT, $12::BYTEA, $4, $4 FROM i
UNION ALL
SELECT $1, $2, $5, $13::TEXT, $14::BYTEA, $4, $4 WHERE NOT EXISTS (SELECT 1 FROM i) AND `+leaseHeld,
			tenant, instance, token, now, exec, c.InstanceID, c.Name, c.Version, c.Input, tagsOf(c.Tags),
			c.Start.Kind, c.Start.Payload, c.IfTaken.Kind, c.IfTaken.Payload)
	}

	// Last: release the lease and write the turn's own rows, conditioned on
	// the release; the count says whether the lease was held.
	n := len(p.History)
	eventIDs, kinds, payloads := make([]int64, n), make([]string, n), make([][]byte, n)
	for i, ev := range p.History {
		eventIDs[i], kinds[i], payloads[i] = ev.EventID, ev.Kind, ev.Payload
	}
	var completedAt, instCompletedAt *int64
	if p.Status != store.StatusRunning {
		completedAt = &now
	}
	if p.Status.Terminal() {
		instCompletedAt = &now
	}
	var errText *string
	if p.Error != "" {
		errText = &p.Error
	}
	instStatus, currentExec, newExecutions := p.Status, exec, 0
	if p.ContinueAsNew != nil {
		instStatus, currentExec, newExecutions = store.StatusRunning, exec+1, 1
	}
	messageIDs := p.MessageIDs
	if messageIDs == nil {
		messageIDs = []string{}
	}
	b.Queue(`
WITH lease AS (
	DELETE FROM instance_locks
	WHERE tenant_id = $1 AND instance_id = $2 AND lock_token = $3 AND locked_until > $4
	RETURNING instance_id
), consumed AS (
	DELETE FROM orchestrator_queue
	WHERE tenant_id = $1 AND instance_id = $2 AND id = ANY($6::UUID[]) AND EXISTS (SELECT 1 FROM lease)
	RETURNING 1
), appended AS (
	INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, payload, created_at)
	SELECT $1, $2, $5, u.event_id, u.kind, u.payload, $4
	FROM unnest($7::INT8[], $8::TEXT[], $9::BYTEA[]) AS u (event_id, kind, payload)
	WHERE EXISTS (SELECT 1 FROM lease)
	RETURNING 1
), execution AS (
	UPDATE executions SET status = $10, output = $11, error = $12, completed_at = $13,
		event_count = event_count + $14
	WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = $5 AND EXISTS (SELECT 1 FROM lease)
	RETURNING 1
), instance AS (
	UPDATE instances SET status = $15, completed_at = $16, updated_at = $4, current_execution_id = $17,
		execution_count = execution_count + $18, event_count = event_count + $14
	WHERE tenant_id = $1 AND instance_id = $2 AND EXISTS (SELECT 1 FROM lease)
	RETURNING 1
)
SELECT count(*) FROM lease`,
		tenant, instance, token, now, exec, messageIDs,
		eventIDs, kinds, payloads,
		string(p.Status), p.Output, errText, completedAt, int64(n),
		string(instStatus), instCompletedAt, currentExec, newExecutions)
}
