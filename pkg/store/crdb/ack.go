package crdb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

// AckOrchestrationItem commits a turn in one transaction that travels in one
// round trip. The turn's correctness rests on the lease and the instance
// row, not on the isolation level: the first statement pins both with writes
// (see pinTurn), every statement writes only if they held, and the last one
// releases the lease, updates the instance, consumes the messages, appends
// history and updates the execution, and reports whether it all held.
// Either the lease was held and everything is written, or nothing is.
//
// It runs READ COMMITTED: under SERIALIZABLE, PostgreSQL's predicate locks
// (taken on whole index pages) make concurrent turns of neighbouring
// instances abort each other constantly, though they share no row. A
// concurrent delete, which is SERIALIZABLE, conflicts with the turn's writes
// to the lease and instance rows, so one of the two waits and retries.
func (s *Store) AckOrchestrationItem(ctx context.Context, p *store.AckOrchestrationItemParams) error {
	if err := validateAck(p); err != nil {
		return err
	}
	if !validToken(p.Lease.Token) || !validToken(p.MessageIDs...) {
		return leaseLost(p.Lease)
	}
	now := s.now()
	statements := len(ackStatements(p, now)) + 1
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

// Every statement of an ack binds $1..$5 to tenant, instance, lock token,
// now and the execution the turn ran on.
//
// The statements before the last rely on two rows staying as they are until
// the transaction ends: the lease (held by this token, not expired) and the
// instance (still there, not being deleted, still on this execution). The
// first of them pins both with writes, which conflict on every database and
// at every isolation level: a claim's compare-and-set and a delete then wait
// for this transaction, and a SERIALIZABLE delete that lost the race
// retries and sees what the turn wrote. The later ones only look.
const (
	pinTurn = `pinned_lease AS (
	UPDATE instance_locks SET locked_until = locked_until
	WHERE tenant_id = $1 AND instance_id = $2 AND lock_token = $3 AND locked_until > $4
	RETURNING 1
), turn AS (
	UPDATE instances SET updated_at = updated_at
	WHERE tenant_id = $1 AND instance_id = $2 AND current_execution_id = $5 AND NOT deleting
		AND EXISTS (SELECT 1 FROM pinned_lease)
	RETURNING 1
)`
	heldTurn = `turn AS (
	SELECT 1 FROM instance_locks l
	JOIN instances i ON i.tenant_id = l.tenant_id AND i.instance_id = l.instance_id
	WHERE l.tenant_id = $1 AND l.instance_id = $2 AND l.lock_token = $3 AND l.locked_until > $4
		AND i.current_execution_id = $5 AND NOT i.deleting
)`
	turnHeld = `EXISTS (SELECT 1 FROM turn)`
)

// ackStatement is one statement of an ack before the last; sql has a %s
// where the turn CTE goes.
type ackStatement struct {
	sql  string
	args []any
	// touchesInstances: the statement writes instances, so it cannot also
	// pin the instance row (CockroachDB allows one write per table and
	// statement).
	touchesInstances bool
}

// ackStatements lists the statements of an ack before the last, in order:
// cancellations first (a turn may cancel and reschedule an activity id),
// then the next execution, new tasks and messages, and children.
func ackStatements(p *store.AckOrchestrationItemParams, now int64) []ackStatement {
	tenant, instance, token, exec := p.Lease.TenantID, p.Lease.InstanceID, p.Lease.Token, p.ExecutionID
	base := func(extra ...any) []any { return append([]any{tenant, instance, token, now, exec}, extra...) }
	var out []ackStatement

	if len(p.CancelActivities) > 0 {
		out = append(out, ackStatement{sql: `WITH %s
DELETE FROM worker_queue
WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = $5 AND activity_id = ANY($6::INT8[])
	AND ` + turnHeld, args: base(p.CancelActivities)})
	}

	if next := p.ContinueAsNew; next != nil {
		out = append(out, ackStatement{sql: `WITH %s, e AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT $1, $2, $5 + 1, 'Running', $6, $4 WHERE ` + turnHeld + `
	RETURNING execution_id
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, $2, execution_id, $7, $8, $4, $4 FROM e`,
			args: base(next.Input, next.Start.Kind, next.Start.Payload)})
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
		out = append(out, ackStatement{sql: `WITH %s, tasks AS (
	INSERT INTO worker_queue (tenant_id, instance_id, execution_id, activity_id, name, task_queue,
		input, attempt, visible_at, created_at)
	SELECT $1, $2, $5, u.activity_id, u.name, u.task_queue, u.input, u.attempt, u.visible_at, $4
	FROM unnest($6::INT8[], $7::TEXT[], $8::TEXT[], $9::BYTEA[], $10::INT8[], $11::INT8[])
		AS u (activity_id, name, task_queue, input, attempt, visible_at)
	WHERE ` + turnHeld + `
	RETURNING 1
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, u.instance_id, u.execution_id, u.kind, u.payload, u.visible_at, $4
FROM unnest($12::TEXT[], $13::INT8[], $14::TEXT[], $15::BYTEA[], $16::INT8[])
	AS u (instance_id, execution_id, kind, payload, visible_at)
WHERE ` + turnHeld,
			args: base(ids, names, queues, inputs, attempts, taskVisible, targets, execs, kinds, payloads, visible)})
	}

	for _, c := range p.Children {
		// The child, its first execution and its start message; or, when
		// the id is taken, the if-taken message to this instance.
		out = append(out, ackStatement{touchesInstances: true, sql: `WITH %s, i AS (
	INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		parent_instance_id, root_instance_id, created_at, updated_at, input, tags, execution_count, event_count)
	SELECT $1, $6, $7, $8, 1, 'Running', $2, root_instance_id, $4, $4, $9, $10, 1, 0
	FROM instances WHERE tenant_id = $1 AND instance_id = $2 AND ` + turnHeld + `
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
SELECT $1, $2, $5, $13::TEXT, $14::BYTEA, $4, $4 WHERE NOT EXISTS (SELECT 1 FROM i) AND ` + turnHeld,
			args: base(c.InstanceID, c.Name, c.Version, c.Input, tagsOf(c.Tags),
				c.Start.Kind, c.Start.Payload, c.IfTaken.Kind, c.IfTaken.Payload)})
	}

	if len(out) > 0 && out[0].touchesInstances {
		// Only children: pin in a statement of its own.
		out = append([]ackStatement{{sql: `WITH %s SELECT count(*) FROM turn`, args: base()}}, out...)
	}
	return out
}

func queueAck(b *pgx.Batch, p *store.AckOrchestrationItemParams, now int64) {
	for i, st := range ackStatements(p, now) {
		cte := heldTurn
		if i == 0 {
			cte = pinTurn
		}
		b.Queue(fmt.Sprintf(st.sql, cte), st.args...)
	}

	// Last: release the lease and write the turn's own rows, conditioned on
	// the release and on the instance (still there, not being deleted, on
	// this execution); the count says whether both held.
	tenant, instance, token, exec := p.Lease.TenantID, p.Lease.InstanceID, p.Lease.Token, p.ExecutionID
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
	RETURNING 1
), instance AS (
	UPDATE instances SET status = $15, completed_at = $16, updated_at = $4, current_execution_id = $17,
		execution_count = execution_count + $18, event_count = event_count + $14
	WHERE tenant_id = $1 AND instance_id = $2 AND current_execution_id = $5 AND NOT deleting
		AND EXISTS (SELECT 1 FROM lease)
	RETURNING 1
), consumed AS (
	DELETE FROM orchestrator_queue
	WHERE tenant_id = $1 AND instance_id = $2 AND id = ANY($6::UUID[]) AND EXISTS (SELECT 1 FROM instance)
	RETURNING 1
), appended AS (
	INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, payload, created_at)
	SELECT $1, $2, $5, u.event_id, u.kind, u.payload, $4
	FROM unnest($7::INT8[], $8::TEXT[], $9::BYTEA[]) AS u (event_id, kind, payload)
	WHERE EXISTS (SELECT 1 FROM instance)
	RETURNING 1
), execution AS (
	UPDATE executions SET status = $10, output = $11, error = $12, completed_at = $13,
		event_count = event_count + $14
	WHERE tenant_id = $1 AND instance_id = $2 AND execution_id = $5 AND EXISTS (SELECT 1 FROM instance)
	RETURNING 1
)
SELECT count(*) FROM instance`,
		tenant, instance, token, now, exec, messageIDs,
		eventIDs, kinds, payloads,
		string(p.Status), p.Output, errText, completedAt, int64(n),
		string(instStatus), instCompletedAt, currentExec, newExecutions)
}
