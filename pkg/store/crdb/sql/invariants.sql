-- The rules that the store's derived state keeps, one statement per rule,
-- each returning the rows that break it (none when the rule holds).
-- Store.CheckInvariants runs them all; the conformance suite runs it after
-- every case and the stress tests at their end. They read every tenant:
-- meant for tests and for an operator's check, not for a hot path.
--
-- An instance marked deleting is part-way through a delete that spans
-- transactions: its rows go in several steps, so only the existence of its
-- rows is judged, not their agreement.

-- name: InvariantCounts
-- instance_counts: a tenant's count of a status, summed over its shards,
-- is the number of its instances of that status not being deleted.
SELECT COALESCE(c.tenant_id, i.tenant_id) AS tenant_id, COALESCE(c.status, i.status) AS status,
	COALESCE(c.n, 0) AS counted, COALESCE(i.n, 0) AS instances
FROM (SELECT tenant_id, status, sum(n)::INT8 AS n FROM instance_counts GROUP BY tenant_id, status) c
FULL JOIN (SELECT tenant_id, status, count(*) AS n FROM instances WHERE NOT deleting GROUP BY tenant_id, status) i
	ON i.tenant_id = c.tenant_id AND i.status = c.status
WHERE COALESCE(c.n, 0) <> COALESCE(i.n, 0);

-- name: InvariantPrunable
-- instance_prunable holds exactly the instances with more than one
-- stored execution, with their status.
SELECT COALESCE(i.tenant_id, p.tenant_id) AS tenant_id, COALESCE(i.instance_id, p.instance_id) AS instance_id,
	i.execution_count, i.status, p.status AS prunable_status
FROM instances i
FULL JOIN instance_prunable p ON p.tenant_id = i.tenant_id AND p.instance_id = i.instance_id
WHERE i.instance_id IS NULL
	OR (NOT i.deleting AND ((p.instance_id IS NOT NULL) <> (i.execution_count > 1) OR p.status <> i.status));

-- name: InvariantInstanceSummary
-- An instance's counters and the columns it copies from its current
-- execution: execution_count is its number of executions, event_count its
-- number of history events, current_execution_id its newest execution,
-- whose status and completion time it carries; an instance completes when
-- it stops running.
SELECT i.tenant_id, i.instance_id, i.execution_count, e.executions, i.event_count, h.events,
	i.current_execution_id, e.newest, i.status, c.status AS execution_status, i.completed_at,
	c.completed_at AS execution_completed_at
FROM instances i
LEFT JOIN executions c ON c.tenant_id = i.tenant_id AND c.instance_id = i.instance_id
	AND c.execution_id = i.current_execution_id
LEFT JOIN LATERAL (
	SELECT count(*) AS executions, max(x.execution_id) AS newest FROM executions x
	WHERE x.tenant_id = i.tenant_id AND x.instance_id = i.instance_id) e ON true
LEFT JOIN LATERAL (
	SELECT count(*) AS events FROM history y
	WHERE y.tenant_id = i.tenant_id AND y.instance_id = i.instance_id) h ON true
WHERE NOT i.deleting AND (
	i.execution_count <> e.executions OR i.event_count <> h.events OR i.current_execution_id <> e.newest
	OR c.status IS NULL OR i.status <> c.status OR i.completed_at IS DISTINCT FROM c.completed_at
	OR (i.status = 'Running') <> (i.completed_at IS NULL));

-- name: InvariantExecutionSummary
-- An execution's event_count is its number of history events; every
-- execution before the current one ended by continuing as new.
SELECT e.tenant_id, e.instance_id, e.execution_id, e.status, e.event_count, h.events
FROM executions e
JOIN instances i ON i.tenant_id = e.tenant_id AND i.instance_id = e.instance_id
LEFT JOIN LATERAL (
	SELECT count(*) AS events FROM history y
	WHERE y.tenant_id = e.tenant_id AND y.instance_id = e.instance_id AND y.execution_id = e.execution_id) h ON true
WHERE NOT i.deleting AND NOT e.deleting AND (
	e.event_count <> h.events
	OR (e.execution_id < i.current_execution_id AND (e.status <> 'ContinuedAsNew' OR e.completed_at IS NULL)));

-- name: InvariantDue
-- due_at, on an instance's lease row, says when it next needs a turn:
-- (1) an instance with a message visible at v is due by v, or by the end
-- of its lease; (2) a leased row is due when its lease ends, earlier only
-- because a message came during the lease (an enqueue lowers due_at below
-- leased_until, to at most the message's visible_at), and (3) later only
-- after an abandon with a delay, then at its earliest message (or never,
-- with none).
SELECT l.tenant_id, l.instance_id, l.due_at, l.leased_until, q.first_visible, q.last_visible
FROM instance_leases l
LEFT JOIN (
	SELECT tenant_id, instance_id, min(visible_at) AS first_visible, max(visible_at) AS last_visible
	FROM orchestrator_queue GROUP BY tenant_id, instance_id
) q ON q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id
WHERE l.due_at > GREATEST(COALESCE(q.first_visible, 9223372036854775807), l.leased_until)
	OR (l.leased_until > 0 AND l.due_at < l.leased_until AND COALESCE(q.last_visible, -1) < l.due_at)
	OR (l.leased_until > 0 AND l.due_at > l.leased_until
		AND l.due_at <> COALESCE(q.first_visible, 9223372036854775807));

-- name: InvariantTags
-- instance_tags holds each tag of each instance, with its creation time.
SELECT COALESCE(t.tenant_id, x.tenant_id) AS tenant_id, COALESCE(t.instance_id, x.instance_id) AS instance_id,
	COALESCE(t.tag_key, x.tag_key) AS tag_key, t.tag_value, x.tag_value AS instance_tag_value,
	t.created_at, x.created_at AS instance_created_at
FROM instance_tags t
FULL JOIN (
	SELECT i.tenant_id, i.instance_id, j.key AS tag_key, j.value AS tag_value, i.created_at
	FROM instances i, jsonb_each_text(i.tags) AS j (key, value)
	WHERE NOT i.deleting
) x ON x.tenant_id = t.tenant_id AND x.instance_id = t.instance_id AND x.tag_key = t.tag_key
WHERE t.instance_id IS NULL
	OR (x.instance_id IS NULL AND NOT EXISTS (SELECT 1 FROM instances i
		WHERE i.tenant_id = t.tenant_id AND i.instance_id = t.instance_id AND i.deleting))
	OR t.tag_value <> x.tag_value OR t.created_at <> x.created_at;

-- name: InvariantOwners
-- Every row belongs to its instance: executions, history (to its
-- execution too, unless the instance is being deleted), activity tasks,
-- lease rows and children's parents; every instance not being deleted has
-- its current execution. An instance that can still need a turn (not
-- ended, not being deleted) has its lease row; an ended one has none,
-- unless a fetch holds a lease on it to consume the messages that reached
-- it after it ended (ClaimZombie: leased_until > 0, until ConsumeZombies).
-- A database written before ended instances dropped their rows holds free
-- ones (leased_until = 0) of the instances that ended then: harmless (no
-- claim takes a row due never, and the row goes with its instance), but
-- this rule lists them until the janitor has deleted those instances.
-- An audit tally belongs to its record.
-- Messages are the exception by design: a turn may send one to an
-- instance that is gone or has ended, and a fetch consumes it later
-- (zombie messages).
SELECT 'execution without instance' AS problem, e.tenant_id, e.instance_id FROM executions e
WHERE NOT EXISTS (SELECT 1 FROM instances i WHERE i.tenant_id = e.tenant_id AND i.instance_id = e.instance_id)
UNION ALL
SELECT 'history without execution', h.tenant_id, h.instance_id FROM history h
WHERE NOT EXISTS (SELECT 1 FROM executions e
		WHERE e.tenant_id = h.tenant_id AND e.instance_id = h.instance_id AND e.execution_id = h.execution_id)
	AND NOT EXISTS (SELECT 1 FROM instances i
		WHERE i.tenant_id = h.tenant_id AND i.instance_id = h.instance_id AND i.deleting)
UNION ALL
SELECT 'activity task without instance', w.tenant_id, w.instance_id FROM worker_queue w
WHERE NOT EXISTS (SELECT 1 FROM instances i WHERE i.tenant_id = w.tenant_id AND i.instance_id = w.instance_id)
UNION ALL
SELECT 'lease without instance', l.tenant_id, l.instance_id FROM instance_leases l
WHERE NOT EXISTS (SELECT 1 FROM instances i WHERE i.tenant_id = l.tenant_id AND i.instance_id = l.instance_id)
UNION ALL
SELECT 'instance without lease', i.tenant_id, i.instance_id FROM instances i
WHERE NOT i.deleting AND i.status NOT IN ('Completed', 'Failed', 'Cancelled')
	AND NOT EXISTS (SELECT 1 FROM instance_leases l WHERE l.tenant_id = i.tenant_id AND l.instance_id = i.instance_id)
UNION ALL
SELECT 'ended instance with a free lease', i.tenant_id, i.instance_id FROM instances i
WHERE i.status IN ('Completed', 'Failed', 'Cancelled')
	AND EXISTS (SELECT 1 FROM instance_leases l
		WHERE l.tenant_id = i.tenant_id AND l.instance_id = i.instance_id AND l.leased_until = 0)
UNION ALL
SELECT 'child without parent', c.tenant_id, c.instance_id FROM instances c
WHERE c.parent_instance_id IS NOT NULL
	AND NOT EXISTS (SELECT 1 FROM instances p WHERE p.tenant_id = c.tenant_id AND p.instance_id = c.parent_instance_id)
UNION ALL
SELECT 'audit tally without record', t.tenant_id, t.record_id FROM audit_tallies t
WHERE NOT EXISTS (SELECT 1 FROM audit_records r WHERE r.tenant_id = t.tenant_id AND r.record_id = t.record_id);
