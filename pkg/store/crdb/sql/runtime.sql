-- The runtime protocol of orchestrations: start, enqueue, fetch (claim and
-- read), renew, abandon; and the reads of an instance and its history.
--
-- Every lease row carries due_at, the time its instance next needs a turn:
-- the earliest visible_at of its messages (9223372036854775807, the largest
-- INT8, when it has none), the lease's end while a dispatcher holds it. The
-- writers keep one rule (sql/invariants.sql, InvariantDue): an instance with
-- a message visible at v is due at v or earlier, or is leased.
--   - An enqueue lowers due_at to its message's visible_at, in the statement
--     that adds the message, and writes the row even when due_at stays as it
--     is: an update that finds the row changed since its statement began
--     reads it again (READ COMMITTED) and works from what it finds, where a
--     condition on due_at would be judged on the row as it was, and could
--     pass over a row that a claim has just leased.
--   - A release (ack, abandon) sets it to the earliest message left, read in
--     its own statement. A message enqueued meanwhile may be missing from
--     that read, so an enqueue onto a row with a lease also lowers due_at
--     below leased_until, which a claim, a renewal and a release never do:
--     the release sees it (after waiting for the enqueue's row lock, it
--     reads the row anew) and keeps the lower value. A wrong guess costs one
--     claim that finds nothing visible and abandons, which sets due_at
--     exactly.

-- name: StartOrchestration
-- The instance, execution 1, its lease row (free, due at once; or, with
-- @leased_until > 0, leased under @lease_token as a claim leases it: eager
-- start), its place in the status counters (shard @shard), its tags and the
-- start message, in one statement; nothing when the id is taken, or when
-- @max_running (unless NULL) is no more than the tenant's running
-- instances. The start message's id is @message_id: an eager start's turn
-- runs before the statement, and its ack, which follows in the same
-- transaction, consumes the message by that id.
-- Starts that no idle loop waits for go batched (StartOrchestrations).
WITH i AS (
	INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		root_instance_id, created_at, updated_at, input, tags, retention, execution_count, event_count)
	SELECT @tenant_id, @instance_id, @name, @version, 1, 'Running', @instance_id, @now, @now, @input, @tags,
		@retention, 1, 0
	WHERE @max_running::INT8 IS NULL OR @max_running::INT8 > (SELECT COALESCE(sum(c.n), 0)::INT8 FROM instance_counts c
		WHERE c.tenant_id = @tenant_id AND c.status = 'Running')
	ON CONFLICT (tenant_id, instance_id) DO NOTHING
	RETURNING instance_id
), e AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT @tenant_id, instance_id, 1, 'Running', @input, @now FROM i
	RETURNING instance_id
), l AS (
	INSERT INTO instance_leases (tenant_id, instance_id, lease_token, leased_until, due_at, claims)
	SELECT @tenant_id, instance_id, @lease_token::UUID, @leased_until::INT8,
		CASE WHEN @leased_until::INT8 > 0 THEN @leased_until::INT8 ELSE @now END,
		CASE WHEN @leased_until::INT8 > 0 THEN 1 ELSE 0 END FROM i
	ON CONFLICT (tenant_id, instance_id) DO UPDATE
		SET lease_token = excluded.lease_token, leased_until = excluded.leased_until, due_at = excluded.due_at,
			claims = excluded.claims, strikes = 0
	RETURNING 1
), counted AS (
	INSERT INTO instance_counts (tenant_id, status, shard, n)
	SELECT @tenant_id, 'Running', @shard, 1 FROM i
	ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n
	RETURNING 1
), tagged AS (
	INSERT INTO instance_tags (tenant_id, instance_id, tag_key, tag_value, created_at)
	SELECT @tenant_id, i.instance_id, t.key, t.value, @now FROM i, jsonb_each_text(@tags::JSONB) AS t (key, value)
	ON CONFLICT (tenant_id, instance_id, tag_key) DO UPDATE
		SET tag_value = excluded.tag_value, created_at = excluded.created_at
	RETURNING 1
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, id, execution_id, kind, payload, visible_at, created_at, trace_context)
SELECT @tenant_id, instance_id, @message_id::UUID, 1, @kind, @payload, @now, @now, NULLIF(@trace_context::TEXT, '') FROM i;

-- name: StartOrchestrations
-- StartOrchestration for starts that no idle loop waits for, batched
-- (starts.go): the instances of @instance_ids (distinct), their lease rows
-- free and due at once. With @max_running, the starts are taken in their
-- order while the tenant's running instances and the starts before them
-- stay below it. Each instance is created at its start's @created_ats.
-- A start with @first_events > 0 comes with its first turn,
-- run before the statement on its start message: it writes what that
-- turn's ack would (its events, tasks and timers; @first_due_delays, the
-- delay of its earliest timer, -1 for none), and no start message. Such a
-- turn ends nothing, starts no child and sends only to its own instance
-- (starts.go, folds). Returns the ids it created.
WITH c AS (
	SELECT * FROM unnest(@instance_ids::TEXT[], @names::TEXT[], @versions::TEXT[], @inputs::BYTEA[], @tags::TEXT[],
		@retentions::TEXT[], @kinds::TEXT[], @payloads::BYTEA[], @trace_contexts::TEXT[], @created_ats::INT8[],
		@first_events::INT8[], @first_due_delays::INT8[]) WITH ORDINALITY
		AS c (instance_id, name, version, input, tags, retention, kind, payload, trace_context, created_at, events, due_delay, ord)
), i AS (
	INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		root_instance_id, created_at, updated_at, input, tags, retention, execution_count, event_count)
	SELECT @tenant_id, c.instance_id, c.name, c.version, 1, 'Running', c.instance_id, c.created_at, @now, c.input, c.tags::JSONB,
		NULLIF(c.retention, '')::JSONB, 1, c.events
	FROM c
	WHERE @max_running::INT8 IS NULL OR @max_running::INT8 >= c.ord + (SELECT COALESCE(sum(n.n), 0)::INT8 FROM instance_counts n
		WHERE n.tenant_id = @tenant_id AND n.status = 'Running')
	ORDER BY c.instance_id
	ON CONFLICT (tenant_id, instance_id) DO NOTHING
	RETURNING instance_id
), e AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at, event_count)
	SELECT @tenant_id, c.instance_id, 1, 'Running', c.input, @now, c.events FROM c JOIN i ON i.instance_id = c.instance_id
	RETURNING 1
), l AS (
	INSERT INTO instance_leases (tenant_id, instance_id, lease_token, leased_until, due_at, claims)
	SELECT @tenant_id, c.instance_id, gen_random_uuid(), 0,
		CASE WHEN c.events = 0 THEN @now WHEN c.due_delay < 0 THEN 9223372036854775807 ELSE @now + c.due_delay END, 0
	FROM c JOIN i ON i.instance_id = c.instance_id
	ON CONFLICT (tenant_id, instance_id) DO UPDATE
		SET lease_token = excluded.lease_token, leased_until = 0, due_at = excluded.due_at, claims = 0, strikes = 0
	RETURNING 1
), counted AS (
	INSERT INTO instance_counts (tenant_id, status, shard, n)
	SELECT @tenant_id, 'Running', @shard, count(*) FROM i HAVING count(*) > 0
	ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n
	RETURNING 1
), tagged AS (
	INSERT INTO instance_tags (tenant_id, instance_id, tag_key, tag_value, created_at)
	SELECT @tenant_id, c.instance_id, t.key, t.value, @now FROM c JOIN i ON i.instance_id = c.instance_id,
		jsonb_each_text(c.tags::JSONB) AS t (key, value)
	ON CONFLICT (tenant_id, instance_id, tag_key) DO UPDATE
		SET tag_value = excluded.tag_value, created_at = excluded.created_at
	RETURNING 1
), appended AS (
	INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, payload, created_at)
	SELECT @tenant_id, u.instance_id, u.execution_id, u.event_id, u.kind, u.payload, @now
	FROM unnest(@event_instance_ids::TEXT[], @event_execution_ids::INT8[], @event_ids::INT8[], @event_kinds::TEXT[],
		@event_payloads::BYTEA[])
		AS u (instance_id, execution_id, event_id, kind, payload)
	WHERE u.instance_id IN (SELECT instance_id FROM i)
	RETURNING 1
), tasks AS (
	-- A task handed to a waiting poll comes leased, as in AckEnqueue.
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
	WHERE u.instance_id IN (SELECT instance_id FROM i)
	RETURNING 1
), queued AS (
	INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at, trace_context)
	SELECT @tenant_id, c.instance_id, 1, c.kind, c.payload, @now, @now, NULLIF(c.trace_context, '')
	FROM c JOIN i ON i.instance_id = c.instance_id WHERE c.events = 0
	UNION ALL
	SELECT @tenant_id, u.target, u.execution_id, u.kind, u.payload, @now + u.delay, @now, NULL
	FROM unnest(@message_sources::TEXT[], @message_targets::TEXT[], @message_execution_ids::INT8[], @message_kinds::TEXT[],
		@message_payloads::BYTEA[], @message_delays::INT8[])
		AS u (source, target, execution_id, kind, payload, delay)
	WHERE u.source IN (SELECT instance_id FROM i)
	RETURNING 1
)
SELECT instance_id FROM i;

-- name: StartRefusal
-- Why a start created nothing: whether the id is taken.
SELECT EXISTS (SELECT 1 FROM instances WHERE tenant_id = @tenant_id AND instance_id = @instance_id);

-- name: Enqueue
-- A message for an instance unless it is gone, being deleted or ended
-- (nothing would consume it); the instance is due by the message's
-- @visible_at (see the rule above: the wake writes the row whatever due_at
-- is). It returns the instance's status and the message's id, NULL when
-- the instance has ended; no row when it is gone.
WITH target AS (
	SELECT tenant_id, instance_id, status FROM instances
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND NOT deleting
), m AS (
	INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at, trace_context)
	SELECT tenant_id, instance_id, @execution_id, @kind, @payload, @visible_at, @now, NULLIF(@trace_context::TEXT, '') FROM target
	WHERE status NOT IN ('Completed', 'Failed', 'Cancelled')
	RETURNING id, instance_id
), woken AS (
	UPDATE instance_leases l
	SET due_at = LEAST(l.due_at, @visible_at, CASE WHEN l.leased_until > 0 THEN l.leased_until - 1 ELSE @visible_at END)
	WHERE l.tenant_id = @tenant_id AND l.instance_id = (SELECT instance_id FROM m)
	RETURNING 1
)
SELECT target.status, (SELECT id::TEXT FROM m) FROM target;

-- name: GetInstance
-- The columns scanInstance reads, then the retention override.
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.retention
FROM instances i
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
WHERE i.tenant_id = @tenant_id AND i.instance_id = @instance_id AND NOT i.deleting;

-- name: GetHistoryExecution
-- The execution a history read names (0: the current one), if it exists
-- and is not being deleted.
SELECT e.execution_id FROM instances i
JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = CASE WHEN @execution_id::INT8 = 0 THEN i.current_execution_id ELSE @execution_id::INT8 END
WHERE i.tenant_id = @tenant_id AND i.instance_id = @instance_id AND NOT i.deleting AND NOT e.deleting;

-- name: GetHistory
-- A page of an execution's history (0: the current one) in event id order.
SELECT h.event_id, h.kind, h.payload, h.created_at
FROM history h
WHERE h.tenant_id = @tenant_id AND h.instance_id = @instance_id AND h.execution_id = (
	SELECT CASE WHEN @execution_id::INT8 = 0 THEN current_execution_id ELSE @execution_id::INT8 END
	FROM instances WHERE tenant_id = @tenant_id AND instance_id = @instance_id)
	AND h.event_id > @after_event_id
ORDER BY h.event_id
LIMIT @limit;

-- name: ClaimForTenant
-- Leases up to @max due instances of a tenant with a free lease, in one
-- statement, and returns their ids (LeasedInputs then reads them). It locks
-- the first due rows in order, skipping rows another claim is taking (SKIP
-- LOCKED: claims never queue behind each other), and takes them by
-- compare-and-set (leased_until <= @now), which alone makes it correct. A
-- claimed row is due when its lease ends. (The index holds only rows with
-- something due; "due_at < 9223372036854775807" says so to a plan made
-- without knowing the tenant.)
WITH due AS (
	SELECT l.instance_id FROM instance_leases l
	WHERE l.tenant_id = @tenant_id AND l.due_at <= @now AND l.due_at < 9223372036854775807 AND l.leased_until <= @now
	ORDER BY l.due_at
	LIMIT @max
	FOR UPDATE SKIP LOCKED
), claimed AS (
	-- By key, from an array: joined with due, the update would be planned
	-- as a hash join over a scan of every lease row of the table.
	UPDATE instance_leases l SET lease_token = @token, leased_until = @until, due_at = @until, claims = l.claims + 1
	WHERE l.tenant_id = @tenant_id AND l.instance_id = ANY(ARRAY(SELECT instance_id FROM due)) AND l.leased_until <= @now
	RETURNING l.tenant_id, l.instance_id
)
SELECT c.tenant_id, c.instance_id FROM claimed c;

-- name: ClaimForAnyTenant
-- The claim of ClaimForTenant for the tenants in turn: the first active
-- tenant after @after (wrapping around) with claimable work (a suspended
-- tenant's instances wait, due, until it is active again), found by
-- walking the tenants in key order and stopping at the first one among
-- whose first due instances (a bounded head, so that the probe costs the
-- same whatever the backlog; leased rows are in it only when a message came
-- during their lease) one has no live lease.
WITH pick AS (
	SELECT tenant_id FROM (
		(SELECT t.tenant_id FROM tenants t
		 WHERE t.tenant_id > @after AND t.state = 'active' AND EXISTS (
			SELECT 1 FROM (
				SELECT l.leased_until FROM instance_leases l
				WHERE l.tenant_id = t.tenant_id AND l.due_at <= @now AND l.due_at < 9223372036854775807
				ORDER BY l.due_at
				LIMIT 512) w
			WHERE w.leased_until <= @now)
		 ORDER BY t.tenant_id LIMIT 1)
		UNION ALL
		(SELECT t.tenant_id FROM tenants t
		 WHERE t.tenant_id <= @after AND t.state = 'active' AND EXISTS (
			SELECT 1 FROM (
				SELECT l.leased_until FROM instance_leases l
				WHERE l.tenant_id = t.tenant_id AND l.due_at <= @now AND l.due_at < 9223372036854775807
				ORDER BY l.due_at
				LIMIT 512) w
			WHERE w.leased_until <= @now)
		 ORDER BY t.tenant_id LIMIT 1)
	) rr
	LIMIT 1
), due AS (
	SELECT l.instance_id FROM instance_leases l
	WHERE l.tenant_id = (SELECT tenant_id FROM pick) AND l.due_at <= @now AND l.due_at < 9223372036854775807
		AND l.leased_until <= @now
	ORDER BY l.due_at
	LIMIT @max
	FOR UPDATE SKIP LOCKED
), claimed AS (
	UPDATE instance_leases l SET lease_token = @token, leased_until = @until, due_at = @until, claims = l.claims + 1
	WHERE l.tenant_id = (SELECT tenant_id FROM pick) AND l.instance_id = ANY(ARRAY(SELECT instance_id FROM due))
		AND l.leased_until <= @now
	RETURNING l.tenant_id, l.instance_id
)
SELECT c.tenant_id, c.instance_id FROM claimed c;

-- name: LeasedInputs
-- Follows a claim in the same round trip, so that it reads what the turns
-- before committed (in READ COMMITTED, a statement sees what committed
-- before it started; the claim may have waited for one of those turns to
-- release its lease): the instances leased under @token, each with its
-- current execution, that execution's history and its visible messages (at
-- most @max_messages, the oldest) as columns of arrays. The elements of one
-- lateral's arrays line up (its aggregates read the same rows in the same
-- order); the fetch sorts them. A NULL name is an instance that is gone or
-- being deleted. The instance's retention override and its tenant's policy
-- come along, so that a turn that continues as new knows, as of its fetch,
-- whether to prune without reading them again. Held leases are found by
-- token among the rows with leased_until > 0 (the index instance_leases_held
-- holds only those), here and below.
SELECT l.tenant_id, l.instance_id, l.claims, l.strikes, i.instance_id IS NOT NULL,
	i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.retention, t.retention,
	h.ids, h.kinds, h.payloads, h.created,
	m.ids, m.executions, m.kinds, m.payloads, m.visible, m.created, m.traces
FROM instance_leases l
LEFT JOIN instances i ON i.tenant_id = l.tenant_id AND i.instance_id = l.instance_id AND NOT i.deleting
LEFT JOIN tenants t ON t.tenant_id = l.tenant_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
LEFT JOIN LATERAL (
	SELECT array_agg(h.event_id) AS ids, array_agg(h.kind) AS kinds, array_agg(h.payload) AS payloads,
		array_agg(h.created_at) AS created
	FROM history h
	WHERE h.tenant_id = i.tenant_id AND h.instance_id = i.instance_id AND h.execution_id = i.current_execution_id
) h ON true
LEFT JOIN LATERAL (
	SELECT array_agg(q.id::TEXT) AS ids, array_agg(q.execution_id) AS executions, array_agg(q.kind) AS kinds,
		array_agg(q.payload) AS payloads, array_agg(q.visible_at) AS visible, array_agg(q.created_at) AS created,
		array_agg(COALESCE(q.trace_context, '')) AS traces
	FROM (
		SELECT q.id, q.execution_id, q.kind, q.payload, q.visible_at, q.created_at, q.trace_context FROM orchestrator_queue q
		WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id AND q.visible_at <= @now
		ORDER BY q.visible_at, q.created_at, q.id
		LIMIT @max_messages) q
) m ON true
WHERE l.lease_token = @token AND l.leased_until > 0;

-- name: ReleaseFailedClaim
-- Lets go of the leases a fetch may hold when reading its results failed
-- after COMMIT was sent: due at once, whoever claims them next sorts out
-- what they hold.
UPDATE instance_leases SET leased_until = 0, due_at = 0 WHERE lease_token = @token AND leased_until > 0;

-- name: FindZombieTenant
-- A tenant with a visible message of an instance that has no lease row
-- (it was deleted): a zombie message. An ended instance keeps no lease row
-- either (AckDropEnded in ack.sql): what reaches it later is a zombie
-- message too.
SELECT q.tenant_id FROM orchestrator_queue q
WHERE q.visible_at <= @now AND NOT EXISTS (SELECT 1 FROM instance_leases l
	WHERE l.tenant_id = q.tenant_id AND l.instance_id = q.instance_id)
LIMIT 1;

-- name: ClaimZombie
-- Leases, for a tenant, one instance among the oldest visible messages
-- (@window entries) that has no lease row: its messages outlived it, or
-- came after it ended. The fetch then consumes them.
INSERT INTO instance_leases (tenant_id, instance_id, lease_token, leased_until, due_at)
SELECT @tenant_id, w.instance_id, @token, @until, @until FROM (
	SELECT q.instance_id, q.visible_at FROM orchestrator_queue q
	WHERE q.tenant_id = @tenant_id
	ORDER BY q.visible_at
	LIMIT @window
) w
WHERE w.visible_at <= @now
	AND NOT EXISTS (SELECT 1 FROM instance_leases l WHERE l.tenant_id = @tenant_id AND l.instance_id = w.instance_id)
LIMIT 1
ON CONFLICT (tenant_id, instance_id) DO NOTHING
RETURNING tenant_id, instance_id;

-- name: ZombieMessages
-- The visible messages of the zombie ClaimZombie leased.
SELECT q.instance_id, q.id::TEXT, q.kind FROM instance_leases l
JOIN orchestrator_queue q ON q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id
WHERE l.tenant_id = @tenant_id AND l.lease_token = @token AND l.leased_until > 0 AND q.visible_at <= @now
LIMIT @max_messages;

-- name: ConsumeZombies
-- Deletes the messages of an instance that no turn will take them for, and
-- the lease taken on it: one that does not exist (unless it came back
-- meanwhile), is being deleted, or has ended (nothing makes an ended
-- instance run again; its turn would consume them without effect).
WITH consumed AS (
	DELETE FROM orchestrator_queue
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND id = ANY(@ids::UUID[])
		AND NOT EXISTS (SELECT 1 FROM instances
			WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND NOT deleting
				AND status NOT IN ('Completed', 'Failed', 'Cancelled'))
	RETURNING id
)
DELETE FROM instance_leases WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND lease_token = @token;

-- name: RenewOrchestrationLease
-- Extends a live lease by compare-and-set; due when the lease ends, unless
-- a message came during it.
UPDATE instance_leases l SET leased_until = @until,
	due_at = CASE WHEN l.due_at < l.leased_until THEN l.due_at ELSE @until END
WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND lease_token = @token AND leased_until > @now;

-- name: StrikeOrchestrationLease
-- Counts, under a live lease, the turn about to run alone (see strikes in
-- migration 0017), and returns the count.
UPDATE instance_leases SET strikes = strikes + 1
WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND lease_token = @token AND leased_until > @now
RETURNING strikes;

-- name: AbandonOrchestrationItem
-- Releases a live lease: due at the earliest message left (or earlier, when
-- a message came during the lease).
UPDATE instance_leases l SET leased_until = 0, claims = 0, strikes = 0, due_at = LEAST(
	CASE WHEN l.due_at < l.leased_until THEN l.due_at ELSE 9223372036854775807 END,
	COALESCE((SELECT min(q.visible_at) FROM orchestrator_queue q
		WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id), 9223372036854775807))
WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND lease_token = @token AND leased_until > @now;

-- name: AbandonOrchestrationItemWithDelay
-- Releases a live lease into one nobody holds (@new_token) until @until:
-- not due before the delay ends.
UPDATE instance_leases l SET lease_token = @new_token, leased_until = @until, claims = 0, strikes = 0, due_at = GREATEST(CASE
	WHEN l.due_at < l.leased_until THEN LEAST(l.due_at, COALESCE((SELECT min(q.visible_at) FROM orchestrator_queue q
		WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id), 9223372036854775807))
	ELSE COALESCE((SELECT min(q.visible_at) FROM orchestrator_queue q
		WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id), 9223372036854775807) END, @until)
WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND lease_token = @token AND leased_until > @now;
