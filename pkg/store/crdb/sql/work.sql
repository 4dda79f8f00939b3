-- Activity tasks (worker_queue): fetch, renew, ack, abandon. A leased task
-- has visible_at = leased_until: the fetch predicate is then visible_at
-- alone, and a lapsed lease makes the task visible again. Every statement
-- is a compare-and-set on the task's row (lease_token), atomic at any
-- isolation level; they run READ COMMITTED, which spares them serialization
-- failures against turns that only share index pages.

-- name: ClaimWorkForTenant
-- Leases up to @max of the oldest visible tasks of a task queue of one
-- tenant, in one statement: it locks the first visible rows in order,
-- skipping rows other claims are taking (SKIP LOCKED: claims never queue
-- behind each other), and takes them by compare-and-set (visible_at <=
-- @now), which alone makes it correct. The tasks of one claim share
-- @token; each lease names its task.
WITH due AS (
	SELECT q.id FROM worker_queue q
	WHERE q.tenant_id = @tenant_id AND q.task_queue = @task_queue AND q.visible_at <= @now
	ORDER BY q.visible_at
	LIMIT @max
	FOR UPDATE SKIP LOCKED
)
-- By key, from an array, as ClaimForTenant does (runtime.sql): joined with
-- due, the update could be planned as a join over a scan of the queue.
UPDATE worker_queue SET lease_token = @token, leased_until = @until, visible_at = @until
WHERE tenant_id = @tenant_id AND id = ANY(ARRAY(SELECT id FROM due)) AND visible_at <= @now
RETURNING tenant_id, id::TEXT, instance_id, execution_id, activity_id, name, task_queue, input, attempt, created_at,
	COALESCE(trace_context, '');

-- name: ClaimWorkForAnyTenant
-- The same claim for the first active tenant after @after (wrapping
-- around) with a visible task on this queue: tenants are served in turn,
-- and a suspended tenant's tasks wait until it is active again.
WITH pick AS (
	SELECT t.tenant_id FROM tenants t
	WHERE t.state = 'active' AND EXISTS (SELECT 1 FROM worker_queue q
		WHERE q.tenant_id = t.tenant_id AND q.task_queue = @task_queue AND q.visible_at <= @now)
	ORDER BY t.tenant_id <= @after, t.tenant_id
	LIMIT 1
), due AS (
	SELECT q.id FROM worker_queue q
	WHERE q.tenant_id = (SELECT tenant_id FROM pick) AND q.task_queue = @task_queue AND q.visible_at <= @now
	ORDER BY q.visible_at
	LIMIT @max
	FOR UPDATE SKIP LOCKED
)
UPDATE worker_queue SET lease_token = @token, leased_until = @until, visible_at = @until
WHERE tenant_id = (SELECT tenant_id FROM pick) AND id = ANY(ARRAY(SELECT id FROM due)) AND visible_at <= @now
RETURNING tenant_id, id::TEXT, instance_id, execution_id, activity_id, name, task_queue, input, attempt, created_at,
	COALESCE(trace_context, '');

-- name: RenewWork
UPDATE worker_queue SET leased_until = @until, visible_at = @until
WHERE tenant_id = @tenant_id AND id = @id AND lease_token = @token AND leased_until > @now;

-- name: AckWork
-- A task that ends without a result for its instance.
DELETE FROM worker_queue WHERE tenant_id = @tenant_id AND id = @id AND lease_token = @token;

-- name: AckWorkWithResult
-- Deletes the task and enqueues its result for the instance, which it makes
-- due at once: when the delete finds no row (the activity was cancelled,
-- its instance deleted, or its lease taken over) nothing is enqueued. An
-- instance that ended meanwhile has no lease row to make due (nor to lease
-- eagerly): its result is a zombie message (ConsumeZombies in runtime.sql). The
-- instance's lease row is written before the task's row is deleted, the
-- order in which a turn that cancels the task takes them: the delete's
-- condition on the wake is evaluated once, before the delete reads a row.
-- The wake writes the row even when due_at stays as it is (see Enqueue in
-- runtime.sql), and while the row has a lease it lowers due_at below
-- leased_until, which tells the release that a message came in.
-- With @leased_until > 0 (eager completion), a wake that finds the
-- instance's lease free (leased_until <= @now) leases it instead, under
-- @lease_token, as a claim would (ClaimForTenant); LeasedInputs follows in
-- the transaction. The lease is judged on the row the update writes (READ
-- COMMITTED reads it anew after a concurrent writer), so it is a
-- compare-and-set like the claim's. The result's id is @message_id: an
-- eager completion's turn may run before the statement (AheadFits).
-- Completions that no idle loop waits for go batched (AckWorkWithResults).
WITH task AS (
	SELECT instance_id FROM worker_queue WHERE tenant_id = @tenant_id AND id = @id AND lease_token = @token
), woken AS (
	UPDATE instance_leases l
	SET due_at = CASE WHEN @leased_until::INT8 > 0 AND l.leased_until <= @now THEN @leased_until::INT8
			ELSE LEAST(l.due_at, @now, CASE WHEN l.leased_until > 0 THEN l.leased_until - 1 ELSE @now END) END,
		lease_token = CASE WHEN @leased_until::INT8 > 0 AND l.leased_until <= @now THEN @lease_token::UUID ELSE l.lease_token END,
		claims = CASE WHEN @leased_until::INT8 > 0 AND l.leased_until <= @now THEN l.claims + 1 ELSE l.claims END,
		leased_until = CASE WHEN @leased_until::INT8 > 0 AND l.leased_until <= @now THEN @leased_until::INT8 ELSE l.leased_until END
	WHERE l.tenant_id = @tenant_id AND l.instance_id = (SELECT instance_id FROM task)
	RETURNING 1
), done AS (
	DELETE FROM worker_queue WHERE tenant_id = @tenant_id AND id = @id AND lease_token = @token
		AND (SELECT count(*) FROM woken) >= 0
	RETURNING instance_id, execution_id
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, id, execution_id, kind, payload, visible_at, created_at, trace_context)
SELECT @tenant_id, instance_id, @message_id::UUID, execution_id, @kind, @payload, @now, @now, NULLIF(@trace_context::TEXT, '')
FROM done;

-- name: AheadFits
-- Follows AckWorkWithResult in the transaction of an eager completion whose
-- turn ran before it, on the instance as the holder's last ack left it
-- (store.EagerLease.Ahead): the lease the write took under @lease_token
-- holds only if that is still the instance, with the result (@message_id)
-- its one visible message and a lease that was free, not lapsed. It reads
-- once the lease is taken (READ COMMITTED: what committed before the
-- statement), and no turn writes the instance while the lease is held, so
-- what it finds stays so until COMMIT. A lease that does not fit is let
-- go, due at its earliest message (the result at the latest), with the
-- claim it counted taken back; the turn's ack
-- that follows then finds no lease and writes nothing. It returns whether
-- the lease fits: no row when the write leased nothing. The lease is found
-- by token, whichever instance the write leased.
WITH held AS (
	SELECT l.tenant_id = @tenant_id AND l.instance_id = @instance_id AND l.claims = 1 AND l.strikes = 0
		AND EXISTS (SELECT 1 FROM instances i WHERE i.tenant_id = l.tenant_id AND i.instance_id = l.instance_id
			AND NOT i.deleting AND i.status = 'Running' AND i.current_execution_id = @execution_id
			AND i.updated_at = @updated_at AND i.event_count = @event_count AND i.execution_count = @execution_count)
		AND EXISTS (SELECT 1 FROM orchestrator_queue q WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id
			AND q.id = @message_id::UUID AND q.execution_id = @execution_id)
		AND NOT EXISTS (SELECT 1 FROM orchestrator_queue q WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id
			AND q.visible_at <= @now AND q.id <> @message_id::UUID) AS fits
	FROM instance_leases l
	WHERE l.lease_token = @lease_token::UUID AND l.leased_until > 0
), released AS (
	UPDATE instance_leases l SET leased_until = 0, claims = l.claims - 1,
		due_at = COALESCE((SELECT min(q.visible_at) FROM orchestrator_queue q
			WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id), @now)
	WHERE l.lease_token = @lease_token::UUID AND l.leased_until > 0 AND NOT (SELECT fits FROM held)
	RETURNING 1
)
SELECT fits FROM held WHERE (SELECT count(*) FROM released) >= 0;

-- name: AckWorkWithResults
-- AckWorkWithResult for completions that no idle loop waits for, batched
-- (completions.go): the tasks of @ids (distinct), each under its @tokens;
-- returns the ids of the tasks it deleted. The instances' lease rows are
-- locked in key order, as an ack locks them (ack.sql), before they are
-- written.
WITH t AS (
	SELECT * FROM unnest(@ids::UUID[], @tokens::UUID[], @kinds::TEXT[], @payloads::BYTEA[], @trace_contexts::TEXT[])
		AS t (id, token, kind, payload, trace_context)
), task AS (
	SELECT w.instance_id FROM worker_queue w
	WHERE w.tenant_id = @tenant_id AND w.id = ANY(@ids::UUID[]) AND (w.id, w.lease_token) IN (SELECT id, token FROM t)
), locked AS (
	SELECT l.instance_id FROM instance_leases l
	WHERE l.tenant_id = @tenant_id AND l.instance_id IN (SELECT instance_id FROM task)
	ORDER BY l.instance_id
	FOR UPDATE
), woken AS (
	UPDATE instance_leases l
	SET due_at = LEAST(l.due_at, @now, CASE WHEN l.leased_until > 0 THEN l.leased_until - 1 ELSE @now END)
	WHERE l.tenant_id = @tenant_id AND l.instance_id IN (SELECT instance_id FROM locked)
	RETURNING 1
), done AS (
	DELETE FROM worker_queue w
	WHERE w.tenant_id = @tenant_id AND w.id = ANY(@ids::UUID[]) AND (w.id, w.lease_token) IN (SELECT id, token FROM t)
		AND (SELECT count(*) FROM woken) >= 0
	RETURNING w.id, w.instance_id, w.execution_id
), enqueued AS (
	INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at, trace_context)
	SELECT @tenant_id, d.instance_id, d.execution_id, t.kind, t.payload, @now, @now, NULLIF(t.trace_context, '')
	FROM done d JOIN t ON t.id = d.id
	RETURNING 1
)
SELECT d.id::TEXT FROM done d WHERE (SELECT count(*) FROM enqueued) >= 0;

-- name: AbandonWork
UPDATE worker_queue SET lease_token = NULL, leased_until = NULL, visible_at = @visible_at
WHERE tenant_id = @tenant_id AND id = @id AND lease_token = @token;
