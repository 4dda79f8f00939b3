-- Pruning an instance's old executions (PruneExecutions, and the bulk
-- prune's transactions). An execution is prunable when an interrupted prune
-- hid it (deleting), or when it is neither current nor running, outside the
-- newest @keep_last (executions are numbered without gaps from the current
-- one down, and pruning takes the oldest, so those are the ones numbered
-- above current - keep_last; 0 keeps none apart) and completed strictly
-- before @completed_before (NULL: no cutoff). Every statement that leaves an
-- instance with one execution removes it from instance_prunable (the
-- "unmarked" CTE), which holds exactly the instances with more than one.

-- name: PruneInstanceExists
SELECT true FROM instances WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND NOT deleting;

-- name: PruneCandidates
-- The prunable executions of one instance, those hidden by an interrupted
-- prune first, then oldest first, up to @limit.
SELECT e.execution_id, e.event_count, e.deleting
FROM instances i
JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
WHERE i.tenant_id = @tenant_id AND i.instance_id = @instance_id AND NOT i.deleting
	AND (e.deleting OR (
		e.execution_id <> i.current_execution_id AND e.status <> 'Running'
		AND (@keep_last::INT8 = 0 OR e.execution_id <= i.current_execution_id - @keep_last::INT8)
		AND (@completed_before::INT8 IS NULL OR e.completed_at < @completed_before::INT8)))
ORDER BY e.deleting DESC, e.execution_id
LIMIT @limit;

-- name: PruneWholeExecutions
-- Executions @execution_ids of one instance, with their history, and the
-- instance's counters.
WITH h AS (
	DELETE FROM history
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND execution_id = ANY(@execution_ids::INT8[])
	RETURNING 1
), e AS (
	DELETE FROM executions
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND execution_id = ANY(@execution_ids::INT8[])
	RETURNING 1
), counted AS (
	UPDATE instances SET execution_count = execution_count - (SELECT count(*) FROM e),
		event_count = event_count - (SELECT count(*) FROM h)
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id
	RETURNING instance_id, execution_count
), unmarked AS (
	DELETE FROM instance_prunable
	WHERE tenant_id = @tenant_id AND instance_id IN (SELECT instance_id FROM counted WHERE execution_count <= 1)
	RETURNING 1
)
SELECT (SELECT count(*) FROM e), (SELECT count(*) FROM h);

-- name: PruneExecutionPiece
-- Up to @limit history events of an execution too big to prune in one
-- transaction, which it hides first (ListExecutions and GetHistory no
-- longer see it).
WITH hide AS (
	UPDATE executions SET deleting = true
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND execution_id = @execution_id AND NOT deleting
	RETURNING event_count
), h AS (
	DELETE FROM history WHERE (tenant_id, instance_id, execution_id, event_id) IN (
		SELECT tenant_id, instance_id, execution_id, event_id FROM history
		WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND execution_id = @execution_id
		ORDER BY event_id LIMIT @limit)
	RETURNING 1
), counted AS (
	UPDATE instances SET event_count = event_count - (SELECT count(*) FROM h)
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id
	RETURNING 1
)
SELECT count(*) FROM h;

-- name: PruneExecutionRow
-- The row of a hidden execution whose history is gone.
WITH e AS (
	DELETE FROM executions
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND execution_id = @execution_id
	RETURNING 1
), counted AS (
	UPDATE instances SET execution_count = execution_count - (SELECT count(*) FROM e)
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id
	RETURNING instance_id, execution_count
), unmarked AS (
	DELETE FROM instance_prunable
	WHERE tenant_id = @tenant_id AND instance_id IN (SELECT instance_id FROM counted WHERE execution_count <= 1)
	RETURNING 1
)
SELECT count(*) FROM e;

-- name: FinishPrune
-- A bulk prune's transaction: the executions paired in @instance_ids and
-- @execution_ids, with their history, and their instances' counters. Both
-- key columns are bound with = ANY, so that the (generic) plan reads the
-- history of the pruned executions only, not of every execution of the
-- instances. Under an audit record (@audit_record_id not empty) it counts
-- what it removed into it (a tally).
WITH d AS (
	SELECT * FROM unnest(@instance_ids::TEXT[], @execution_ids::INT8[]) AS d (instance_id, execution_id)
), h AS (
	DELETE FROM history h
	WHERE h.tenant_id = @tenant_id AND h.instance_id = ANY(@instance_ids::TEXT[]) AND h.execution_id = ANY(@execution_ids::INT8[])
		AND (h.instance_id, h.execution_id) IN (SELECT * FROM d)
	RETURNING h.instance_id
), e AS (
	DELETE FROM executions e
	WHERE e.tenant_id = @tenant_id AND e.instance_id = ANY(@instance_ids::TEXT[]) AND e.execution_id = ANY(@execution_ids::INT8[])
		AND (e.instance_id, e.execution_id) IN (SELECT * FROM d)
	RETURNING e.instance_id
), counts AS (
	SELECT x.instance_id, sum(x.execs) AS execs, sum(x.events) AS events FROM (
		SELECT instance_id, 1 AS execs, 0 AS events FROM e
		UNION ALL
		SELECT instance_id, 0, 1 FROM h) x
	GROUP BY x.instance_id
), counted AS (
	UPDATE instances i SET execution_count = i.execution_count - c.execs, event_count = i.event_count - c.events
	FROM counts c
	WHERE i.tenant_id = @tenant_id AND i.instance_id = ANY(@instance_ids::TEXT[]) AND i.instance_id = c.instance_id
	RETURNING i.instance_id, i.execution_count
), unmarked AS (
	DELETE FROM instance_prunable
	WHERE tenant_id = @tenant_id AND instance_id IN (SELECT instance_id FROM counted WHERE execution_count <= 1)
	RETURNING 1
), tally AS (
	INSERT INTO audit_tallies (tenant_id, record_id, executions, events)
	SELECT @tenant_id, @audit_record_id::TEXT, (SELECT count(*) FROM e), (SELECT count(*) FROM h)
	WHERE @audit_record_id::TEXT <> ''
	RETURNING 1
)
SELECT (SELECT count(DISTINCT instance_id) FROM e), (SELECT count(*) FROM e), (SELECT count(*) FROM h);
