-- A turn's commit (AckOrchestrationItems): one batch, at READ COMMITTED,
-- per tenant. Every statement binds the turns as three arrays read back by
-- unnest: @turn_instance_ids, @turn_tokens, @turn_execution_ids. Joins with
-- the turns repeat "instance_id = ANY(@turn_instance_ids)": the plans are
-- prepared once, without knowing how many turns come, and the predicate
-- keeps them on the primary keys.
--
-- The statements before the last (AckWake, then the pinning one, then the
-- held ones) rely on two rows per turn staying as they are until the
-- transaction ends: the lease (held by this token, not expired) and the
-- instance (still there, not being deleted, still on this execution). The
-- first statement that reads the turns locks their lease rows in key order
-- and pins the instances with a write (its "turn" CTE); the later ones only
-- look (their "turn" CTE is a join). A claim passes over a locked row, a
-- delete waits for it, and a write conflicts on every database and at every
-- isolation level: a SERIALIZABLE delete that lost the race retries and sees
-- what the turn wrote. On CockroachDB a SERIALIZABLE transaction's row locks
-- are best effort; a lease taken from under it then fails its commit, which
-- retries and finds the lease lost.
--
-- Lease rows are locked in key order (the "locked" CTE, ORDER BY
-- instance_id FOR UPDATE): acks wake other instances by writing their lease
-- rows, so an ack waits for the rows other acks hold, and theirs for its;
-- when every ack takes its rows in one order, those waits never close a
-- cycle (a bare UPDATE takes its rows in whatever order its plan reads
-- them). The statement of an ack that first touches lease rows takes them
-- this way: AckWake, else the pinning statement, else AckRelease.
--
-- CockroachDB takes one write per table and statement: that is why the
-- wake, the pin of a turn that only starts children, and the children have
-- statements of their own.

-- name: AckWake
-- Makes due the instances the turns send messages to (@wake_delays, in
-- milliseconds from @now), by the rule of Enqueue (runtime.sql); the turns'
-- own lease rows come with delay -1: they are locked with the others, not
-- written (the release reads what a turn's own instance has left). A wake
-- for a turn that turns out not to hold costs one needless claim.
WITH locked AS (
	SELECT o.instance_id FROM instance_leases o
	WHERE o.tenant_id = @tenant_id AND o.instance_id = ANY(@wake_instance_ids::TEXT[])
	ORDER BY o.instance_id
	FOR UPDATE
)
UPDATE instance_leases l
SET due_at = LEAST(l.due_at, @now + w.delay, CASE WHEN l.leased_until > 0 THEN l.leased_until - 1 ELSE @now + w.delay END)
FROM unnest(@wake_instance_ids::TEXT[], @wake_delays::INT8[]) AS w (instance_id, delay)
WHERE l.tenant_id = @tenant_id AND l.instance_id = ANY(@wake_instance_ids::TEXT[]) AND l.instance_id = w.instance_id
	AND w.delay >= 0 AND l.instance_id IN (SELECT instance_id FROM locked);

-- name: AckPin
-- The pin alone, for turns that only start children (AckChildren writes
-- instances, so it cannot pin them too).
WITH turns AS (
	SELECT * FROM unnest(@turn_instance_ids::TEXT[], @turn_tokens::UUID[], @turn_execution_ids::INT8[])
		AS t (instance_id, token, execution_id)
), pinned_lease AS (
	SELECT l.instance_id FROM instance_leases l
	JOIN turns t ON t.instance_id = l.instance_id AND t.token = l.lease_token
	WHERE l.tenant_id = @tenant_id AND l.instance_id = ANY(@turn_instance_ids::TEXT[]) AND l.leased_until > @now
	ORDER BY l.instance_id
	FOR UPDATE OF l
), turn AS (
	UPDATE instances i SET updated_at = i.updated_at
	FROM turns t
	WHERE i.tenant_id = @tenant_id AND i.instance_id = ANY(@turn_instance_ids::TEXT[])
		AND i.instance_id = t.instance_id AND i.current_execution_id = t.execution_id
		AND NOT i.deleting AND i.instance_id IN (SELECT instance_id FROM pinned_lease)
	RETURNING i.instance_id
)
SELECT count(*) FROM turn;

-- name: AckCancel
-- Pins the turns, then deletes the tasks of the activities they cancel and
-- the messages they withdraw (the timers of a decided race, of an answered
-- wait). It comes first among the turns' statements: a turn may cancel an
-- activity id and schedule it anew (AckEnqueue).
WITH turns AS (
	SELECT * FROM unnest(@turn_instance_ids::TEXT[], @turn_tokens::UUID[], @turn_execution_ids::INT8[])
		AS t (instance_id, token, execution_id)
), pinned_lease AS (
	SELECT l.instance_id FROM instance_leases l
	JOIN turns t ON t.instance_id = l.instance_id AND t.token = l.lease_token
	WHERE l.tenant_id = @tenant_id AND l.instance_id = ANY(@turn_instance_ids::TEXT[]) AND l.leased_until > @now
	ORDER BY l.instance_id
	FOR UPDATE OF l
), turn AS (
	UPDATE instances i SET updated_at = i.updated_at
	FROM turns t
	WHERE i.tenant_id = @tenant_id AND i.instance_id = ANY(@turn_instance_ids::TEXT[])
		AND i.instance_id = t.instance_id AND i.current_execution_id = t.execution_id
		AND NOT i.deleting AND i.instance_id IN (SELECT instance_id FROM pinned_lease)
	RETURNING i.instance_id
), cancelled AS (
	DELETE FROM worker_queue w
	WHERE w.tenant_id = @tenant_id AND w.instance_id = ANY(@cancel_instance_ids::TEXT[]) AND (w.instance_id, w.execution_id, w.activity_id) IN (
		SELECT * FROM unnest(@cancel_instance_ids::TEXT[], @cancel_execution_ids::INT8[], @cancel_activity_ids::INT8[]))
		AND w.instance_id IN (SELECT instance_id FROM turn)
	RETURNING 1
), withdrawn AS (
	DELETE FROM orchestrator_queue q
	WHERE q.tenant_id = @tenant_id AND q.instance_id = ANY(@withdraw_instance_ids::TEXT[]) AND (q.instance_id, q.kind, q.payload) IN (
		SELECT * FROM unnest(@withdraw_instance_ids::TEXT[], @withdraw_kinds::TEXT[], @withdraw_payloads::BYTEA[]))
		AND q.instance_id IN (SELECT instance_id FROM turn)
	RETURNING 1
)
SELECT count(*) FROM turn;

-- name: AckEnqueuePinning
-- AckEnqueue for turns that cancel nothing: it pins the turns itself. Kept
-- as a second whole statement: one statement serving both would either pin
-- always (a second write of every instance AckCancel already pinned) or
-- never (an AckPin more in the batch of the commonest turn), and a choice
-- of CTE made at run time is the template this file has none of.
WITH turns AS (
	SELECT * FROM unnest(@turn_instance_ids::TEXT[], @turn_tokens::UUID[], @turn_execution_ids::INT8[])
		AS t (instance_id, token, execution_id)
), pinned_lease AS (
	SELECT l.instance_id FROM instance_leases l
	JOIN turns t ON t.instance_id = l.instance_id AND t.token = l.lease_token
	WHERE l.tenant_id = @tenant_id AND l.instance_id = ANY(@turn_instance_ids::TEXT[]) AND l.leased_until > @now
	ORDER BY l.instance_id
	FOR UPDATE OF l
), turn AS (
	UPDATE instances i SET updated_at = i.updated_at
	FROM turns t
	WHERE i.tenant_id = @tenant_id AND i.instance_id = ANY(@turn_instance_ids::TEXT[])
		AND i.instance_id = t.instance_id AND i.current_execution_id = t.execution_id
		AND NOT i.deleting AND i.instance_id IN (SELECT instance_id FROM pinned_lease)
	RETURNING i.instance_id
), tasks AS (
	-- A task handed to a waiting poll comes leased (a token, leased_until
	-- > 0), visible when its lease lapses, like a claimed task.
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
	WHERE u.instance_id IN (SELECT instance_id FROM turn)
	RETURNING 1
), next_executions AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT @tenant_id, u.instance_id, u.execution_id, 'Running', u.input, @now
	FROM unnest(@next_instance_ids::TEXT[], @next_execution_ids::INT8[], @next_inputs::BYTEA[]) AS u (instance_id, execution_id, input)
	WHERE u.instance_id IN (SELECT instance_id FROM turn)
	RETURNING 1
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT @tenant_id, u.target, u.execution_id, u.kind, u.payload, @now + u.delay, @now
FROM unnest(@message_sources::TEXT[], @message_targets::TEXT[], @message_execution_ids::INT8[], @message_kinds::TEXT[],
	@message_payloads::BYTEA[], @message_delays::INT8[])
	AS u (source, target, execution_id, kind, payload, delay)
WHERE u.source IN (SELECT instance_id FROM turn)
UNION ALL
SELECT @tenant_id, u.instance_id, u.execution_id, u.kind, u.payload, @now, @now
FROM unnest(@next_instance_ids::TEXT[], @next_execution_ids::INT8[], @next_kinds::TEXT[], @next_payloads::BYTEA[])
	AS u (instance_id, execution_id, kind, payload)
WHERE u.instance_id IN (SELECT instance_id FROM turn);

-- name: AckEnqueue
-- The turns' new activity tasks, messages (to themselves and others, which
-- AckWake made due) and next executions with their start messages.
WITH turns AS (
	SELECT * FROM unnest(@turn_instance_ids::TEXT[], @turn_tokens::UUID[], @turn_execution_ids::INT8[])
		AS t (instance_id, token, execution_id)
), turn AS (
	SELECT t.instance_id FROM turns t
	JOIN instance_leases l ON l.tenant_id = @tenant_id AND l.instance_id = t.instance_id AND l.lease_token = t.token
	JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = t.instance_id
	WHERE l.instance_id = ANY(@turn_instance_ids::TEXT[]) AND i.instance_id = ANY(@turn_instance_ids::TEXT[])
		AND l.leased_until > @now AND i.current_execution_id = t.execution_id AND NOT i.deleting
), tasks AS (
	-- A task handed to a waiting poll comes leased (a token, leased_until
	-- > 0), visible when its lease lapses, like a claimed task.
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
	WHERE u.instance_id IN (SELECT instance_id FROM turn)
	RETURNING 1
), next_executions AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT @tenant_id, u.instance_id, u.execution_id, 'Running', u.input, @now
	FROM unnest(@next_instance_ids::TEXT[], @next_execution_ids::INT8[], @next_inputs::BYTEA[]) AS u (instance_id, execution_id, input)
	WHERE u.instance_id IN (SELECT instance_id FROM turn)
	RETURNING 1
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT @tenant_id, u.target, u.execution_id, u.kind, u.payload, @now + u.delay, @now
FROM unnest(@message_sources::TEXT[], @message_targets::TEXT[], @message_execution_ids::INT8[], @message_kinds::TEXT[],
	@message_payloads::BYTEA[], @message_delays::INT8[])
	AS u (source, target, execution_id, kind, payload, delay)
WHERE u.source IN (SELECT instance_id FROM turn)
UNION ALL
SELECT @tenant_id, u.instance_id, u.execution_id, u.kind, u.payload, @now, @now
FROM unnest(@next_instance_ids::TEXT[], @next_execution_ids::INT8[], @next_kinds::TEXT[], @next_payloads::BYTEA[])
	AS u (instance_id, execution_id, kind, payload)
WHERE u.instance_id IN (SELECT instance_id FROM turn);

-- name: AckChildren
-- The children the turns start, with their first executions, leases, start
-- messages, counters and tags; or, when an id is taken, the if-taken
-- message to the parent. Always after a pinning statement.
WITH turns AS (
	SELECT * FROM unnest(@turn_instance_ids::TEXT[], @turn_tokens::UUID[], @turn_execution_ids::INT8[])
		AS t (instance_id, token, execution_id)
), turn AS (
	SELECT t.instance_id FROM turns t
	JOIN instance_leases l ON l.tenant_id = @tenant_id AND l.instance_id = t.instance_id AND l.lease_token = t.token
	JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = t.instance_id
	WHERE l.instance_id = ANY(@turn_instance_ids::TEXT[]) AND i.instance_id = ANY(@turn_instance_ids::TEXT[])
		AND l.leased_until > @now AND i.current_execution_id = t.execution_id AND NOT i.deleting
), c AS (
	SELECT * FROM unnest(@child_parents::TEXT[], @child_parent_execution_ids::INT8[], @child_instance_ids::TEXT[],
		@child_names::TEXT[], @child_versions::TEXT[], @child_inputs::BYTEA[], @child_tags::TEXT[],
		@child_start_kinds::TEXT[], @child_start_payloads::BYTEA[], @child_taken_kinds::TEXT[], @child_taken_payloads::BYTEA[])
		AS c (parent, parent_execution, instance_id, name, version, input, tags,
			start_kind, start_payload, taken_kind, taken_payload)
), created AS (
	INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		parent_instance_id, root_instance_id, created_at, updated_at, input, tags, execution_count, event_count)
	SELECT @tenant_id, c.instance_id, c.name, c.version, 1, 'Running', c.parent, p.root_instance_id, @now, @now, c.input,
		c.tags::JSONB, 1, 0
	FROM c JOIN instances p ON p.tenant_id = @tenant_id AND p.instance_id = c.parent
	WHERE c.parent IN (SELECT instance_id FROM turn)
	ON CONFLICT (tenant_id, instance_id) DO NOTHING
	RETURNING instance_id
), e AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT @tenant_id, c.instance_id, 1, 'Running', c.input, @now FROM c WHERE c.instance_id IN (SELECT instance_id FROM created)
	RETURNING 1
), leases AS (
	INSERT INTO instance_leases (tenant_id, instance_id, lease_token, leased_until, due_at)
	SELECT @tenant_id, instance_id, gen_random_uuid(), 0, @now FROM created
	ON CONFLICT (tenant_id, instance_id) DO UPDATE SET lease_token = excluded.lease_token, leased_until = 0, due_at = excluded.due_at, claims = 0, strikes = 0
	RETURNING 1
), counted AS (
	INSERT INTO instance_counts (tenant_id, status, shard, n)
	SELECT @tenant_id, 'Running', @shard, count(*) FROM created HAVING count(*) > 0
	ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n
	RETURNING 1
), tagged AS (
	INSERT INTO instance_tags (tenant_id, instance_id, tag_key, tag_value, created_at)
	SELECT @tenant_id, c.instance_id, t.key, t.value, @now FROM c, jsonb_each_text(c.tags::JSONB) AS t (key, value)
	WHERE c.instance_id IN (SELECT instance_id FROM created)
	ON CONFLICT (tenant_id, instance_id, tag_key) DO UPDATE SET tag_value = excluded.tag_value, created_at = excluded.created_at
	RETURNING 1
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT @tenant_id, c.instance_id, 1, c.start_kind, c.start_payload, @now, @now FROM c
WHERE c.instance_id IN (SELECT instance_id FROM created)
UNION ALL
SELECT @tenant_id, c.parent, c.parent_execution, c.taken_kind, c.taken_payload, @now, @now FROM c
WHERE c.parent IN (SELECT instance_id FROM turn) AND c.instance_id NOT IN (SELECT instance_id FROM created);

-- name: AckRelease
-- The last statement but AckDropEnded: releases the leases and writes the
-- turns' own rows, conditioned on the release (or, for a turn that ends
-- its instance, on its lease) and on the instance (still there, not being
-- deleted, on this execution); it returns the turns that held, with what
-- it set in their instances. A turn that only consumes messages sent to
-- an execution already ended keeps its completion time.
WITH t AS (
	SELECT * FROM unnest(@turn_instance_ids::TEXT[], @turn_tokens::UUID[], @turn_execution_ids::INT8[],
		@turn_statuses::TEXT[], @turn_outputs::BYTEA[], @turn_errors::TEXT[], @turn_completed_at::INT8[],
		@turn_events::INT8[], @turn_instance_statuses::TEXT[], @turn_instance_completed_at::INT8[],
		@turn_current_execution_ids::INT8[], @turn_new_executions::INT8[])
		AS t (instance_id, token, execution_id, status, output, error, completed_at,
			events, instance_status, instance_completed_at, current_execution_id, new_executions)
), locked AS (
	SELECT o.instance_id, o.lease_token, o.leased_until FROM instance_leases o
	WHERE o.tenant_id = @tenant_id AND o.instance_id = ANY(@turn_instance_ids::TEXT[])
	ORDER BY o.instance_id
	FOR UPDATE
), lease AS (
	-- Due at the earliest message the turn leaves (its own sends, which
	-- the statements before wrote, included), by the rule of the release
	-- (AbandonOrchestrationItem in runtime.sql): a message that came in
	-- while leased lowered due_at below leased_until. A turn that names
	-- another execution than the current one writes nothing and consumes
	-- nothing: its lease goes, due at its earliest message. The turns that
	-- end their instances are not released: AckDropEnded deletes their rows.
	UPDATE instance_leases l SET leased_until = 0, claims = 0, strikes = 0, due_at = LEAST(
		CASE WHEN l.due_at < l.leased_until THEN l.due_at ELSE 9223372036854775807 END,
		CASE WHEN EXISTS (SELECT 1 FROM instances c WHERE c.tenant_id = @tenant_id AND c.instance_id = t.instance_id
				AND c.current_execution_id = t.execution_id AND NOT c.deleting)
			THEN COALESCE((SELECT min(q.visible_at) FROM orchestrator_queue q
				WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id AND NOT (q.id = ANY(@consumed_message_ids::UUID[]))),
				9223372036854775807)
			ELSE COALESCE((SELECT min(q.visible_at) FROM orchestrator_queue q
				WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id), 9223372036854775807) END)
	FROM t
	WHERE l.tenant_id = @tenant_id AND l.instance_id = ANY(@turn_instance_ids::TEXT[])
		AND l.instance_id = t.instance_id AND l.lease_token = t.token AND l.leased_until > @now
		AND l.instance_id IN (SELECT instance_id FROM locked) AND t.instance_status NOT IN ('Completed', 'Failed', 'Cancelled')
	RETURNING l.instance_id
), held AS (
	SELECT instance_id FROM lease
	UNION ALL
	SELECT k.instance_id FROM locked k JOIN t ON t.instance_id = k.instance_id
	WHERE k.lease_token = t.token AND k.leased_until > @now AND t.instance_status IN ('Completed', 'Failed', 'Cancelled')
), instance AS (
	UPDATE instances i SET status = t.instance_status, completed_at = COALESCE(i.completed_at, t.instance_completed_at), updated_at = @now,
		current_execution_id = t.current_execution_id, execution_count = i.execution_count + t.new_executions,
		event_count = i.event_count + t.events
	FROM t
	WHERE i.tenant_id = @tenant_id AND i.instance_id = ANY(@turn_instance_ids::TEXT[])
		AND i.instance_id = t.instance_id AND i.current_execution_id = t.execution_id
		AND NOT i.deleting AND i.instance_id IN (SELECT instance_id FROM held)
	RETURNING i.instance_id, i.status, i.execution_count, i.event_count, i.updated_at, i.completed_at
), prev AS (
	-- The statement's snapshot: the statuses before this ack.
	SELECT p.instance_id, p.status FROM instances p WHERE p.tenant_id = @tenant_id AND p.instance_id = ANY(@turn_instance_ids::TEXT[])
), chained AS (
	-- The instances with an execution a prune can take, by status: a
	-- continue-as-new adds one, a change of status moves it.
	INSERT INTO instance_prunable (tenant_id, instance_id, status)
	SELECT @tenant_id, x.instance_id, x.status FROM instance x
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
	SELECT @tenant_id, status, @shard, sum(d)::INT8 FROM moved GROUP BY status HAVING sum(d) <> 0 ORDER BY status
	ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n
	RETURNING 1
), consumed AS (
	DELETE FROM orchestrator_queue q
	WHERE q.tenant_id = @tenant_id AND q.instance_id = ANY(@turn_instance_ids::TEXT[]) AND q.id = ANY(@consumed_message_ids::UUID[])
		AND (q.instance_id, q.id) IN (SELECT * FROM unnest(@consumed_instance_ids::TEXT[], @consumed_message_ids::UUID[]))
		AND q.instance_id IN (SELECT instance_id FROM instance)
	RETURNING 1
), appended AS (
	INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, payload, created_at)
	SELECT @tenant_id, u.instance_id, u.execution_id, u.event_id, u.kind, u.payload, @now
	FROM unnest(@event_instance_ids::TEXT[], @event_execution_ids::INT8[], @event_ids::INT8[], @event_kinds::TEXT[],
		@event_payloads::BYTEA[])
		AS u (instance_id, execution_id, event_id, kind, payload)
	WHERE u.instance_id IN (SELECT instance_id FROM instance)
	RETURNING 1
), execution AS (
	UPDATE executions e SET status = t.status, output = t.output, error = NULLIF(t.error, ''),
		completed_at = COALESCE(e.completed_at, t.completed_at), event_count = e.event_count + t.events
	FROM t
	WHERE e.tenant_id = @tenant_id AND e.instance_id = ANY(@turn_instance_ids::TEXT[])
		AND e.instance_id = t.instance_id AND e.execution_id = t.execution_id
		AND t.instance_id IN (SELECT instance_id FROM instance)
	RETURNING 1
)
SELECT instance_id, updated_at, completed_at, execution_count, event_count FROM instance;

-- name: AckDropEnded
-- Follows AckRelease when turns end their instances (Completed, Failed,
-- Cancelled): deletes their lease rows, which AckRelease left held under
-- the turns' tokens (and locked), where it wrote the end. Nothing claims
-- an ended instance (Enqueue refuses it), so its row would only wait, due
-- never, for the instance's delete. A message that reaches it later (a
-- child's result to a parent that ended first, one the turn left
-- unconsumed) finds no row to make due: it is a zombie message, which a
-- fetch consumes (ConsumeZombies in runtime.sql). A statement of its own:
-- CockroachDB refuses one that updates a table and deletes from it. The
-- instance is read by a scalar subquery, per lease row: as a join, a plan
-- made without knowing the turns (a generic plan on fresh statistics)
-- scans the tenant's instances.
DELETE FROM instance_leases l
WHERE l.tenant_id = @tenant_id AND l.instance_id = ANY(@ended_instance_ids::TEXT[])
	AND (l.instance_id, l.lease_token) IN (SELECT * FROM unnest(@ended_instance_ids::TEXT[], @ended_tokens::UUID[]))
	AND l.leased_until > @now
	AND (SELECT i.status IN ('Completed', 'Failed', 'Cancelled') AND NOT i.deleting FROM instances i
		WHERE i.tenant_id = l.tenant_id AND i.instance_id = l.instance_id);
