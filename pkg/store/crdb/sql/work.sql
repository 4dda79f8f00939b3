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
-- returns the ids of the tasks it deleted, and whether each one's turn was
-- written here. The instances' lease rows are locked in key order, as an
-- ack locks them (ack.sql), before they are written.
-- A completion with @folds true comes with its instance's next turn, run
-- before the statement on the instance as the dispatcher's last ack left
-- it (@fold_instances, @fold_execution_ids, @fold_events, @fold_updated_ats,
-- the instance the task's must be). The turn is
-- written in place of the result when, with both rows locked (READ
-- COMMITTED reads them anew after a concurrent writer), the instance is
-- still so, running its first execution and not being deleted, its lease
-- is free with nothing visible (due after @now: an enqueue lowers due_at
-- in its own transaction), and no other completion of the batch is its.
-- Such a turn ends its instance (@fold_statuses), or schedules tasks
-- (AckWorkFolded follows) and sets timers on it. The others enqueue their
-- result and make the instance due, as AckWorkWithResult does. The
-- instances of those turns are @fold_instance_ids: the predicate on them
-- keeps the generic plan on primary keys.
WITH t AS (
	SELECT * FROM unnest(@ids::UUID[], @tokens::UUID[], @kinds::TEXT[], @payloads::BYTEA[], @trace_contexts::TEXT[],
		@folds::BOOL[], @fold_execution_ids::INT8[], @fold_events::INT8[], @fold_updated_ats::INT8[], @fold_statuses::TEXT[],
		@fold_outputs::BYTEA[], @fold_errors::TEXT[], @fold_new_events::INT8[], @fold_due_delays::INT8[],
		@fold_tokens::UUID[], @fold_instances::TEXT[])
		AS t (id, token, kind, payload, trace_context, fold, execution_id, events, updated_at, status, output, error,
			new_events, due_delay, fold_token, instance_id)
), task AS (
	SELECT w.id, w.instance_id FROM worker_queue w
	WHERE w.tenant_id = @tenant_id AND w.id = ANY(@ids::UUID[]) AND (w.id, w.lease_token) IN (SELECT id, token FROM t)
), locked AS (
	SELECT l.instance_id, l.leased_until, l.due_at FROM instance_leases l
	WHERE l.tenant_id = @tenant_id AND l.instance_id IN (SELECT instance_id FROM task)
	ORDER BY l.instance_id
	FOR UPDATE
), fits AS (
	SELECT i.instance_id, i.current_execution_id AS execution_id, k.id, t.status, t.output, t.error, t.new_events, t.due_delay,
		t.fold_token FROM instances i
	JOIN task k ON k.instance_id = i.instance_id
	JOIN t ON t.id = k.id
	JOIN locked l ON l.instance_id = i.instance_id
	WHERE i.tenant_id = @tenant_id AND i.instance_id = ANY(@fold_instance_ids::TEXT[]) AND t.fold
		AND l.leased_until = 0 AND l.due_at > @now
		AND i.instance_id = t.instance_id
		AND NOT i.deleting AND i.status = 'Running' AND i.execution_count = 1 AND i.current_execution_id = t.execution_id
		AND i.event_count = t.events AND i.updated_at = t.updated_at
		AND NOT EXISTS (SELECT 1 FROM task o WHERE o.instance_id = i.instance_id AND o.id <> k.id)
	FOR UPDATE OF i
), woken AS (
	UPDATE instance_leases l
	SET due_at = CASE WHEN l.instance_id IN (SELECT instance_id FROM fits)
		THEN LEAST(l.due_at, COALESCE((SELECT @now + f.due_delay FROM fits f WHERE f.instance_id = l.instance_id AND f.due_delay >= 0),
			9223372036854775807))
		ELSE LEAST(l.due_at, @now, CASE WHEN l.leased_until > 0 THEN l.leased_until - 1 ELSE @now END) END,
		lease_token = COALESCE((SELECT f.fold_token FROM fits f WHERE f.instance_id = l.instance_id), l.lease_token)
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
	FROM done d JOIN t ON t.id = d.id WHERE d.id NOT IN (SELECT id FROM fits)
	UNION ALL
	SELECT @tenant_id, u.target, u.execution_id, u.kind, u.payload, @now + u.delay, @now, NULL
	FROM unnest(@message_sources::TEXT[], @message_targets::TEXT[], @message_execution_ids::INT8[], @message_kinds::TEXT[],
		@message_payloads::BYTEA[], @message_delays::INT8[])
		AS u (source, target, execution_id, kind, payload, delay)
	WHERE u.source IN (SELECT instance_id FROM fits)
	RETURNING 1
), instance AS (
	UPDATE instances i SET status = f.status, updated_at = @now, event_count = i.event_count + f.new_events,
		completed_at = CASE WHEN f.status <> 'Running' THEN @now END
	FROM fits f
	WHERE i.tenant_id = @tenant_id AND i.instance_id = ANY(@fold_instance_ids::TEXT[]) AND i.instance_id = f.instance_id
	RETURNING 1
), execution AS (
	UPDATE executions e SET status = f.status, output = f.output, error = NULLIF(f.error, ''),
		completed_at = CASE WHEN f.status <> 'Running' THEN @now END, event_count = e.event_count + f.new_events
	FROM fits f
	WHERE e.tenant_id = @tenant_id AND e.instance_id = ANY(@fold_instance_ids::TEXT[]) AND e.instance_id = f.instance_id
		AND e.execution_id = f.execution_id
	RETURNING 1
), counted AS (
	INSERT INTO instance_counts (tenant_id, status, shard, n)
	SELECT @tenant_id, m.status, @shard, sum(m.d)::INT8 FROM (
		SELECT 'Running' AS status, -1 AS d FROM fits WHERE status <> 'Running'
		UNION ALL
		SELECT status, 1 FROM fits WHERE status <> 'Running') AS m
	GROUP BY m.status HAVING sum(m.d) <> 0 ORDER BY m.status
	ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n
	RETURNING 1
), appended AS (
	INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, payload, created_at)
	SELECT @tenant_id, u.instance_id, u.execution_id, u.event_id, u.kind, u.payload, @now
	FROM unnest(@event_instance_ids::TEXT[], @event_execution_ids::INT8[], @event_ids::INT8[], @event_kinds::TEXT[],
		@event_payloads::BYTEA[])
		AS u (instance_id, execution_id, event_id, kind, payload)
	WHERE u.instance_id IN (SELECT instance_id FROM fits)
	RETURNING 1
)
SELECT d.id::TEXT, d.id IN (SELECT id FROM fits) FROM done d
WHERE (SELECT count(*) FROM enqueued) >= 0 AND (SELECT count(*) FROM instance) >= 0 AND (SELECT count(*) FROM execution) >= 0
	AND (SELECT count(*) FROM counted) >= 0 AND (SELECT count(*) FROM appended) >= 0;

-- name: AckWorkFolded
-- Follows AckWorkWithResults in its transaction when it may have written
-- turns that end their instances or schedule tasks: of the instances of
-- @fold_instance_ids, those whose lease row it marked with the turn's own
-- @fold_tokens lose the row when @fold_ended (as AckDropEnded takes it),
-- and get their tasks (the task_ arrays, as in AckEnqueue). A statement
-- of its own, since CockroachDB refuses one that writes a table twice.
WITH folded AS (
	SELECT l.instance_id, f.ended FROM instance_leases l
	JOIN unnest(@fold_instance_ids::TEXT[], @fold_tokens::UUID[], @fold_ended::BOOL[]) AS f (instance_id, token, ended)
		ON f.instance_id = l.instance_id AND f.token = l.lease_token
	WHERE l.tenant_id = @tenant_id AND l.instance_id = ANY(@fold_instance_ids::TEXT[]) AND l.leased_until = 0
), dropped AS (
	DELETE FROM instance_leases l
	WHERE l.tenant_id = @tenant_id AND l.instance_id = ANY(@fold_instance_ids::TEXT[])
		AND l.instance_id IN (SELECT instance_id FROM folded WHERE ended)
	RETURNING 1
)
INSERT INTO worker_queue (tenant_id, id, instance_id, execution_id, activity_id, name, task_queue,
	input, attempt, visible_at, created_at, trace_context, lease_token, leased_until)
SELECT @tenant_id, u.id::UUID, u.instance_id, u.execution_id, u.activity_id, u.name, u.task_queue, u.input, u.attempt,
	CASE WHEN u.leased_until > 0 THEN u.leased_until ELSE @now + u.delay END, @now,
	NULLIF(u.trace_context, ''), NULLIF(u.lease_token, '')::UUID, NULLIF(u.leased_until, 0)
FROM unnest(@task_instance_ids::TEXT[], @task_execution_ids::INT8[], @task_activity_ids::INT8[], @task_names::TEXT[],
	@task_queues::TEXT[], @task_inputs::BYTEA[], @task_attempts::INT8[], @task_delays::INT8[], @task_trace_contexts::TEXT[],
	@task_ids::TEXT[], @task_lease_tokens::TEXT[], @task_leased_until::INT8[])
	AS u (instance_id, execution_id, activity_id, name, task_queue, input, attempt, delay, trace_context,
		id, lease_token, leased_until)
WHERE u.instance_id IN (SELECT instance_id FROM folded) AND (SELECT count(*) FROM dropped) >= 0;

-- name: AbandonWork
UPDATE worker_queue SET lease_token = NULL, leased_until = NULL, visible_at = @visible_at
WHERE tenant_id = @tenant_id AND id = @id AND lease_token = @token;
