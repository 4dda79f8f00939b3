package crdb

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

// AckOrchestrationItem commits one turn; see AckOrchestrationItems.
func (s *Store) AckOrchestrationItem(ctx context.Context, p *store.AckOrchestrationItemParams) error {
	errs, err := s.AckOrchestrationItems(ctx, &store.AckOrchestrationItemsParams{Turns: []*store.AckOrchestrationItemParams{p}})
	if err != nil {
		return err
	}
	return errs[0]
}

// AckOrchestrationItems commits turns in one transaction that travels in one
// round trip, with a handful of statements whatever the number of turns
// (each statement carries every turn's rows in arrays). A turn's
// correctness rests on its lease and its instance row, not on the isolation
// level: the first statement pins both with writes (pinTurns), every
// statement writes only the rows of turns that held, and the last one
// releases the leases, updates the instances, consumes the messages, appends
// history, updates the executions, and reports which turns held. A turn
// whose lease was lost writes nothing.
//
// It runs READ COMMITTED: under SERIALIZABLE, PostgreSQL's predicate locks
// (taken on whole index pages) make concurrent turns of neighbouring
// instances abort each other constantly, though they share no row. A
// concurrent delete, which is SERIALIZABLE, conflicts with a turn's writes
// to its lease and instance rows, so one of the two waits and retries.
func (s *Store) AckOrchestrationItems(ctx context.Context, p *store.AckOrchestrationItemsParams) ([]error, error) {
	results := make([]error, len(p.Turns))
	byTenant := map[string][]int{}
	var tenants []string
	for i, t := range p.Turns {
		if err := validateAck(t); err != nil {
			return nil, err
		}
		if !validToken(t.Lease.Token) || !validToken(t.MessageIDs...) {
			results[i] = leaseLost(t.Lease)
			continue
		}
		if byTenant[t.Lease.TenantID] == nil {
			tenants = append(tenants, t.Lease.TenantID)
		}
		byTenant[t.Lease.TenantID] = append(byTenant[t.Lease.TenantID], i)
	}
	if len(tenants) == 0 {
		return results, nil
	}
	// Lease rows are locked in key order (see wakeTargets).
	slices.Sort(tenants)
	for _, idx := range byTenant {
		slices.SortStableFunc(idx, func(a, b int) int {
			return cmp.Compare(p.Turns[a].Lease.InstanceID, p.Turns[b].Lease.InstanceID)
		})
	}
	now := s.now()
	held := map[int]bool{}
	err := s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		for _, tenant := range tenants {
			turns := make([]*store.AckOrchestrationItemParams, 0, len(byTenant[tenant]))
			for _, i := range byTenant[tenant] {
				turns = append(turns, p.Turns[i])
			}
			queueAck(b, tenant, turns, now)
		}
	}, func(br pgx.BatchResults) error {
		clear(held)
		for _, tenant := range tenants {
			idx := byTenant[tenant]
			turns := make([]*store.AckOrchestrationItemParams, 0, len(idx))
			for _, i := range idx {
				turns = append(turns, p.Turns[i])
			}
			for range ackMiddleStatements(turns) {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			done, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			ok := map[string]bool{}
			for _, id := range done {
				ok[id] = true
			}
			for _, i := range idx {
				held[i] = ok[p.Turns[i].Lease.InstanceID]
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, t := range p.Turns {
		if results[i] == nil && !held[i] {
			results[i] = leaseLost(t.Lease)
		}
	}
	return results, nil
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
	for _, m := range p.WithdrawMessages {
		if m.Kind == "" {
			return invalid("a withdrawn message has no kind")
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

// The statements of an ack bind $1 to the tenant and $2 to now, and $3..$5
// to the turns: instance ids, lease tokens, executions. Joins with the turns
// repeat "instance_id = ANY($3)": plans are prepared once, without knowing
// how many turns come, and the predicate keeps them on the primary keys.
//
// The statements before the last rely on two rows per turn staying as they
// are until the transaction ends: the lease (held by this token, not
// expired) and the instance (still there, not being deleted, still on this
// execution). The first statement locks the lease rows in key order (see
// lockLeases) and pins the instances with a write. A claim passes over a
// locked row, a delete waits for it, and a write conflicts on every
// database and at every isolation level: a SERIALIZABLE delete that lost
// the race retries and sees what the turn wrote. (On CockroachDB a
// SERIALIZABLE transaction's row locks are best effort; a lease taken
// from under it then fails its commit, which retries and finds the lease
// lost.) The later ones only look.
const (
	turnsParam = `turns AS (
	SELECT * FROM unnest($3::TEXT[], $4::UUID[], $5::INT8[]) AS t (instance_id, token, execution_id)
)`
	pinTurns = turnsParam + `, pinned_lease AS (
	SELECT l.instance_id FROM instance_locks l
	JOIN turns t ON t.instance_id = l.instance_id AND t.token = l.lock_token
	WHERE l.tenant_id = $1 AND l.instance_id = ANY($3::TEXT[]) AND l.locked_until > $2
	ORDER BY l.instance_id
	FOR UPDATE OF l
), turn AS (
	UPDATE instances i SET updated_at = i.updated_at
	FROM turns t
	WHERE i.tenant_id = $1 AND i.instance_id = ANY($3::TEXT[])
		AND i.instance_id = t.instance_id AND i.current_execution_id = t.execution_id
		AND NOT i.deleting AND i.instance_id IN (SELECT instance_id FROM pinned_lease)
	RETURNING i.instance_id
)`
	heldTurns = turnsParam + `, turn AS (
	SELECT t.instance_id FROM turns t
	JOIN instance_locks l ON l.tenant_id = $1 AND l.instance_id = t.instance_id AND l.lock_token = t.token
	JOIN instances i ON i.tenant_id = $1 AND i.instance_id = t.instance_id
	WHERE l.instance_id = ANY($3::TEXT[]) AND i.instance_id = ANY($3::TEXT[]) AND l.locked_until > $2 AND i.current_execution_id = t.execution_id AND NOT i.deleting
)`
)

// lockLeases locks the lease rows of instances $3 of tenant $1 in key
// order. Enqueues wake other instances by writing their lease rows
// (wakeDue), so an ack's wake waits for the rows other acks hold, and
// theirs for its; when every ack takes its rows in one order, those waits
// never close a cycle. (A bare UPDATE takes its rows in whatever order its
// plan reads them.) The statement of an ack that first touches lease rows
// takes them this way: the wake, else the pin (pinTurns, in the same
// order), else the last statement; the rows it updates are among those it
// locked first.
const lockLeases = `locked AS (
	SELECT o.instance_id FROM instance_locks o
	WHERE o.tenant_id = $1 AND o.instance_id = ANY($3::TEXT[])
	ORDER BY o.instance_id
	FOR UPDATE
)`

// ackStatement is one statement of an ack before the last; its SQL opens
// with the turn CTE, pinned or held, and its arguments follow those of the
// turns, unless it is bare.
type ackStatement struct {
	sql  string
	args []any
	bare bool
}

// ackMiddleStatements lists the statements of an ack before the last, in
// order: the wake of the other instances the turns send to, cancellations
// (a turn may cancel an activity id and schedule it anew), then new tasks,
// messages and next executions, then children. The first after the wake
// pins the turns (queueAck puts pinTurns where the %s is, and heldTurns in
// the others).
func ackMiddleStatements(turns []*store.AckOrchestrationItemParams) []ackStatement {
	var cancels, enqueues, children bool
	for _, t := range turns {
		cancels = cancels || len(t.CancelActivities) > 0 || len(t.WithdrawMessages) > 0
		enqueues = enqueues || len(t.Activities) > 0 || len(t.Messages) > 0 || t.ContinueAsNew != nil
		children = children || len(t.Children) > 0
	}
	if !cancels && !enqueues && !children {
		return nil
	}
	var out []ackStatement

	if cancels {
		// Cancelled activities' tasks, and withdrawn messages (the timers
		// of a decided race, of an answered wait) of the turns' instances.
		var cInst, wInst, wKind []string
		var cExec, cActivity []int64
		var wPayload [][]byte
		for _, t := range turns {
			for _, a := range t.CancelActivities {
				cInst, cExec, cActivity = append(cInst, t.Lease.InstanceID), append(cExec, t.ExecutionID), append(cActivity, a)
			}
			for _, m := range t.WithdrawMessages {
				wInst, wKind, wPayload = append(wInst, t.Lease.InstanceID), append(wKind, m.Kind), append(wPayload, m.Payload)
			}
		}
		out = append(out, ackStatement{sql: `WITH %s, cancelled AS (
	DELETE FROM worker_queue w
	WHERE w.tenant_id = $1 AND w.instance_id = ANY($6::TEXT[]) AND (w.instance_id, w.execution_id, w.activity_id) IN (
		SELECT * FROM unnest($6::TEXT[], $7::INT8[], $8::INT8[]))
		AND w.instance_id IN (SELECT instance_id FROM turn)
	RETURNING 1
), withdrawn AS (
	DELETE FROM orchestrator_queue q
	WHERE q.tenant_id = $1 AND q.instance_id = ANY($9::TEXT[]) AND (q.instance_id, q.kind, q.payload) IN (
		SELECT * FROM unnest($9::TEXT[], $10::TEXT[], $11::BYTEA[]))
		AND q.instance_id IN (SELECT instance_id FROM turn)
	RETURNING 1
)
SELECT count(*) FROM turn`, args: []any{cInst, cExec, cActivity, wInst, wKind, wPayload}})
	}

	if enqueues {
		var (
			aInst, aName, aQueue           []string
			aExec, aID, aAttempt, aVisible []int64
			aInput                         [][]byte
			oSrc, oTarget, oKind           []string
			oExec, oVisible                []int64
			oPayload                       [][]byte
			nInst, nKind                   []string
			nExec                          []int64
			nInput, nPayload               [][]byte
		)
		for _, t := range turns {
			for _, a := range t.Activities {
				aInst, aExec, aID, aName, aQueue = append(aInst, t.Lease.InstanceID), append(aExec, t.ExecutionID), append(aID, a.ActivityID), append(aName, a.Name), append(aQueue, a.TaskQueue)
				aInput, aAttempt, aVisible = append(aInput, a.Input), append(aAttempt, int64(max(a.Attempt, 1))), append(aVisible, a.Delay.Milliseconds())
			}
			for _, m := range t.Messages {
				oSrc, oTarget, oExec, oKind = append(oSrc, t.Lease.InstanceID), append(oTarget, m.InstanceID), append(oExec, m.ExecutionID), append(oKind, m.Message.Kind)
				oPayload, oVisible = append(oPayload, m.Message.Payload), append(oVisible, m.Delay.Milliseconds())
			}
			if next := t.ContinueAsNew; next != nil {
				nInst, nExec, nInput = append(nInst, t.Lease.InstanceID), append(nExec, t.ExecutionID+1), append(nInput, next.Input)
				nKind, nPayload = append(nKind, next.Start.Kind), append(nPayload, next.Start.Payload)
			}
		}
		out = append(out, ackStatement{sql: `WITH %s, tasks AS (
	INSERT INTO worker_queue (tenant_id, instance_id, execution_id, activity_id, name, task_queue,
		input, attempt, visible_at, created_at)
	SELECT $1, u.instance_id, u.execution_id, u.activity_id, u.name, u.task_queue, u.input, u.attempt, $2 + u.delay, $2
	FROM unnest($6::TEXT[], $7::INT8[], $8::INT8[], $9::TEXT[], $10::TEXT[], $11::BYTEA[], $12::INT8[], $13::INT8[])
		AS u (instance_id, execution_id, activity_id, name, task_queue, input, attempt, delay)
	WHERE u.instance_id IN (SELECT instance_id FROM turn)
	RETURNING 1
), next_executions AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT $1, u.instance_id, u.execution_id, 'Running', u.input, $2
	FROM unnest($20::TEXT[], $21::INT8[], $22::BYTEA[]) AS u (instance_id, execution_id, input)
	WHERE u.instance_id IN (SELECT instance_id FROM turn)
	RETURNING 1
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, u.target, u.execution_id, u.kind, u.payload, $2 + u.delay, $2
FROM unnest($14::TEXT[], $15::TEXT[], $16::INT8[], $17::TEXT[], $18::BYTEA[], $19::INT8[])
	AS u (source, target, execution_id, kind, payload, delay)
WHERE u.source IN (SELECT instance_id FROM turn)
UNION ALL
SELECT $1, u.instance_id, u.execution_id, u.kind, u.payload, $2, $2
FROM unnest($20::TEXT[], $21::INT8[], $23::TEXT[], $24::BYTEA[]) AS u (instance_id, execution_id, kind, payload)
WHERE u.instance_id IN (SELECT instance_id FROM turn)`,
			args: []any{aInst, aExec, aID, aName, aQueue, aInput, aAttempt, aVisible,
				oSrc, oTarget, oExec, oKind, oPayload, oVisible,
				nInst, nExec, nInput, nKind, nPayload}})
	}

	if children {
		var (
			parent, id, name, version, tags, startKind, takenKind []string
			parentExec                                            []int64
			input, startPayload, takenPayload                     [][]byte
		)
		for _, t := range turns {
			for _, c := range t.Children {
				tagJSON, _ := json.Marshal(tagsOf(c.Tags))
				parent, parentExec, id, name, version = append(parent, t.Lease.InstanceID), append(parentExec, t.ExecutionID), append(id, c.InstanceID), append(name, c.Name), append(version, c.Version)
				input, tags = append(input, c.Input), append(tags, string(tagJSON))
				startKind, startPayload, takenKind, takenPayload = append(startKind, c.Start.Kind), append(startPayload, c.Start.Payload), append(takenKind, c.IfTaken.Kind), append(takenPayload, c.IfTaken.Payload)
			}
		}
		// The children, their first executions and start messages; or, when
		// an id is taken, the if-taken message to the parent.
		out = append(out, ackStatement{sql: `WITH %s, c AS (
	SELECT * FROM unnest($6::TEXT[], $7::INT8[], $8::TEXT[], $9::TEXT[], $10::TEXT[], $11::BYTEA[], $12::TEXT[],
		$13::TEXT[], $14::BYTEA[], $15::TEXT[], $16::BYTEA[])
		AS c (parent, parent_execution, instance_id, name, version, input, tags,
			start_kind, start_payload, taken_kind, taken_payload)
), created AS (
	INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		parent_instance_id, root_instance_id, created_at, updated_at, input, tags, execution_count, event_count)
	SELECT $1, c.instance_id, c.name, c.version, 1, 'Running', c.parent, p.root_instance_id, $2, $2, c.input,
		c.tags::JSONB, 1, 0
	FROM c JOIN instances p ON p.tenant_id = $1 AND p.instance_id = c.parent
	WHERE c.parent IN (SELECT instance_id FROM turn)
	ON CONFLICT (tenant_id, instance_id) DO NOTHING
	RETURNING instance_id
), e AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT $1, c.instance_id, 1, 'Running', c.input, $2 FROM c WHERE c.instance_id IN (SELECT instance_id FROM created)
	RETURNING 1
), leases AS (
	INSERT INTO instance_locks (tenant_id, instance_id, lock_token, locked_until, due_at)
	SELECT $1, instance_id, gen_random_uuid(), 0, $2 FROM created
	ON CONFLICT (tenant_id, instance_id) DO UPDATE SET lock_token = excluded.lock_token, locked_until = 0, due_at = excluded.due_at, claims = 0, strikes = 0
	RETURNING 1
), counted AS (
	INSERT INTO instance_counts (tenant_id, status, shard, n)
	SELECT $1, 'Running', $17, count(*) FROM created HAVING count(*) > 0
	ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n
	RETURNING 1
), tagged AS (
	INSERT INTO instance_tags (tenant_id, instance_id, tag_key, tag_value, created_at)
	SELECT $1, c.instance_id, t.key, t.value, $2 FROM c, jsonb_each_text(c.tags::JSONB) AS t (key, value)
	WHERE c.instance_id IN (SELECT instance_id FROM created)
	ON CONFLICT (tenant_id, instance_id, tag_key) DO UPDATE SET tag_value = excluded.tag_value, created_at = excluded.created_at
	RETURNING 1
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, c.instance_id, 1, c.start_kind, c.start_payload, $2, $2 FROM c
WHERE c.instance_id IN (SELECT instance_id FROM created)
UNION ALL
SELECT $1, c.parent, c.parent_execution, c.taken_kind, c.taken_payload, $2, $2 FROM c
WHERE c.parent IN (SELECT instance_id FROM turn) AND c.instance_id NOT IN (SELECT instance_id FROM created)`,
			args: []any{parent, parentExec, id, name, version, input, tags, startKind, startPayload, takenKind, takenPayload,
				countShard()}})
	}
	if !cancels && !enqueues {
		// Only children, whose statement writes instances and so cannot
		// pin them too (one write per table and statement, on CockroachDB):
		// pin on its own first.
		out = append([]ackStatement{{sql: `WITH %s SELECT count(*) FROM turn`}}, out...)
	}
	if w := wakeTargets(turns); w != nil {
		out = append([]ackStatement{*w}, out...)
	}
	return out
}

// wakeTargets is the statement that makes the instances the turns send
// messages to due (see wakeDue), or nil when they send only to themselves:
// the release reads what a turn's own instance has left. It has its own
// statement (the pin writes the same table, and CockroachDB takes one write
// per table and statement), the first of the ack, and locks the turns' own
// lease rows with the others (lockLeases). A wake for a turn that turns out
// not to hold costs one needless claim.
func wakeTargets(turns []*store.AckOrchestrationItemParams) *ackStatement {
	// Delay per lease row; -1 for the turns' own.
	due := make(map[string]int64, len(turns))
	for _, t := range turns {
		due[t.Lease.InstanceID] = -1
	}
	woken := false
	for _, t := range turns {
		for _, m := range t.Messages {
			if d, ok := due[m.InstanceID]; !ok || d > m.Delay.Milliseconds() {
				due[m.InstanceID], woken = m.Delay.Milliseconds(), true
			}
		}
	}
	if !woken {
		return nil
	}
	ids := slices.Sorted(maps.Keys(due))
	delays := make([]int64, len(ids))
	for i, id := range ids {
		delays[i] = due[id]
	}
	return &ackStatement{bare: true, args: []any{ids, delays}, sql: `WITH ` + lockLeases + `
UPDATE instance_locks l SET due_at = ` + wakeDue("$2 + w.delay") + `
FROM unnest($3::TEXT[], $4::INT8[]) AS w (instance_id, delay)
WHERE l.tenant_id = $1 AND l.instance_id = ANY($3::TEXT[]) AND l.instance_id = w.instance_id AND w.delay >= 0
	AND l.instance_id IN (SELECT instance_id FROM locked)`}
}

func queueAck(b *pgx.Batch, tenant string, turns []*store.AckOrchestrationItemParams, now int64) {
	n := len(turns)
	inst, token, exec := make([]string, n), make([]string, n), make([]int64, n)
	for i, t := range turns {
		inst[i], token[i], exec[i] = t.Lease.InstanceID, t.Lease.Token, t.ExecutionID
	}
	turn := pinTurns
	for _, st := range ackMiddleStatements(turns) {
		if st.bare {
			b.Queue(st.sql, append([]any{tenant, now}, st.args...)...)
			continue
		}
		b.Queue(fmt.Sprintf(st.sql, turn), append([]any{tenant, now, inst, token, exec}, st.args...)...)
		turn = heldTurns
	}

	// Last: release the leases and write the turns' own rows, conditioned
	// on the release and on the instance (still there, not being deleted,
	// on this execution); the instance ids returned are the turns that held.
	// A turn that only consumes messages sent to an execution already ended
	// keeps its completion time.
	var (
		status, errText, instStatus        []string
		outputs                            [][]byte
		completedAt, instCompletedAt       []*int64
		events, currentExec, newExecutions []int64
		mInst, mID, hInst, hKind           []string
		hExec, hEvent                      []int64
		hPayload                           [][]byte
	)
	for _, t := range turns {
		var done, instDone *int64
		if t.Status != store.StatusRunning {
			done = &now
		}
		if t.Status.Terminal() {
			instDone = &now
		}
		st, cur, grew := t.Status, t.ExecutionID, int64(0)
		if t.ContinueAsNew != nil {
			st, cur, grew = store.StatusRunning, t.ExecutionID+1, 1
		}
		status, outputs, errText = append(status, string(t.Status)), append(outputs, t.Output), append(errText, t.Error)
		completedAt, events = append(completedAt, done), append(events, int64(len(t.History)))
		instStatus, instCompletedAt, currentExec, newExecutions = append(instStatus, string(st)), append(instCompletedAt, instDone), append(currentExec, cur), append(newExecutions, grew)
		for _, id := range t.MessageIDs {
			mInst, mID = append(mInst, t.Lease.InstanceID), append(mID, id)
		}
		for _, ev := range t.History {
			hInst, hExec, hEvent, hKind, hPayload = append(hInst, t.Lease.InstanceID), append(hExec, t.ExecutionID), append(hEvent, ev.EventID), append(hKind, ev.Kind), append(hPayload, ev.Payload)
		}
	}
	b.Queue(`
WITH t AS (
	SELECT * FROM unnest($3::TEXT[], $4::UUID[], $5::INT8[], $6::TEXT[], $7::BYTEA[], $8::TEXT[], $9::INT8[],
		$10::INT8[], $11::TEXT[], $12::INT8[], $13::INT8[], $14::INT8[])
		AS t (instance_id, token, execution_id, status, output, error, completed_at,
			events, instance_status, instance_completed_at, current_execution_id, new_executions)
), `+lockLeases+`, lease AS (
	-- Due at the earliest message the turn leaves (its own sends, which
	-- the statements before wrote, included). A turn that names another
	-- execution than the current one writes nothing and consumes nothing:
	-- its lease goes, due at its earliest message.
	UPDATE instance_locks l SET locked_until = 0, claims = 0, strikes = 0, due_at = CASE
		WHEN EXISTS (SELECT 1 FROM instances c WHERE c.tenant_id = $1 AND c.instance_id = t.instance_id
			AND c.current_execution_id = t.execution_id AND NOT c.deleting)
		THEN `+releaseDue(nextDue("$16::UUID[]"))+`
		ELSE `+releaseDue(nextDue(""))+` END
	FROM t
	WHERE l.tenant_id = $1 AND l.instance_id = ANY($3::TEXT[])
		AND l.instance_id = t.instance_id AND l.lock_token = t.token AND l.locked_until > $2
		AND l.instance_id IN (SELECT instance_id FROM locked)
	RETURNING l.instance_id
), instance AS (
	UPDATE instances i SET status = t.instance_status, completed_at = COALESCE(i.completed_at, t.instance_completed_at), updated_at = $2,
		current_execution_id = t.current_execution_id, execution_count = i.execution_count + t.new_executions,
		event_count = i.event_count + t.events
	FROM t
	WHERE i.tenant_id = $1 AND i.instance_id = ANY($3::TEXT[])
		AND i.instance_id = t.instance_id AND i.current_execution_id = t.execution_id
		AND NOT i.deleting AND i.instance_id IN (SELECT instance_id FROM lease)
	RETURNING i.instance_id, i.status, i.execution_count
), prev AS (
	-- The statement's snapshot: the statuses before this ack.
	SELECT p.instance_id, p.status FROM instances p WHERE p.tenant_id = $1 AND p.instance_id = ANY($3::TEXT[])
), chained AS (
	-- The instances with an execution a prune can take, by status: a
	-- continue-as-new adds one, a change of status moves it.
	INSERT INTO instance_prunable (tenant_id, instance_id, status)
	SELECT $1, x.instance_id, x.status FROM instance x
	JOIN prev p ON p.instance_id = x.instance_id
	JOIN t ON t.instance_id = x.instance_id
	WHERE x.execution_count > 1 AND (t.new_executions > 0 OR p.status <> x.status)
	ON CONFLICT (tenant_id, instance_id) DO UPDATE SET status = excluded.status
	RETURNING 1
), moved AS (
	SELECT p.status, -1 AS d FROM instance x JOIN prev p ON p.instance_id = x.instance_id WHERE p.status <> x.status
	UNION ALL
	SELECT x.status, 1 FROM instance x JOIN prev p ON p.instance_id = x.instance_id WHERE p.status <> x.status
), counted AS (
	INSERT INTO instance_counts (tenant_id, status, shard, n)
	SELECT $1, status, $22, sum(d)::INT8 FROM moved GROUP BY status HAVING sum(d) <> 0 ORDER BY status
	ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n
	RETURNING 1
), consumed AS (
	DELETE FROM orchestrator_queue q
	WHERE q.tenant_id = $1 AND q.instance_id = ANY($3::TEXT[]) AND q.id = ANY($16::UUID[])
		AND (q.instance_id, q.id) IN (SELECT * FROM unnest($15::TEXT[], $16::UUID[]))
		AND q.instance_id IN (SELECT instance_id FROM instance)
	RETURNING 1
), appended AS (
	INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, payload, created_at)
	SELECT $1, u.instance_id, u.execution_id, u.event_id, u.kind, u.payload, $2
	FROM unnest($17::TEXT[], $18::INT8[], $19::INT8[], $20::TEXT[], $21::BYTEA[])
		AS u (instance_id, execution_id, event_id, kind, payload)
	WHERE u.instance_id IN (SELECT instance_id FROM instance)
	RETURNING 1
), execution AS (
	UPDATE executions e SET status = t.status, output = t.output, error = NULLIF(t.error, ''),
		completed_at = COALESCE(e.completed_at, t.completed_at), event_count = e.event_count + t.events
	FROM t
	WHERE e.tenant_id = $1 AND e.instance_id = ANY($3::TEXT[])
		AND e.instance_id = t.instance_id AND e.execution_id = t.execution_id
		AND t.instance_id IN (SELECT instance_id FROM instance)
	RETURNING 1
)
SELECT instance_id FROM instance`,
		tenant, now, inst, token, exec,
		status, outputs, errText, completedAt, events, instStatus, instCompletedAt, currentExec, newExecutions,
		mInst, mID, hInst, hExec, hEvent, hKind, hPayload, countShard())
}
