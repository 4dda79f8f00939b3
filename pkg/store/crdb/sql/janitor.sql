-- The janitor's reads (what has expired, what deleting or pruning it would
-- take), its runs, and the audit records of destructive operations.

-- name: ExpiryByPolicy
-- Terminal roots of one status that follow the tenant's policy (no
-- retention of their own), completed before @completed_before, after the
-- position (@after_completed_at, @after_id), of the names @names (all when
-- empty) but not @exclude_names: the scan of one rule. From
-- instances_expiry: its predicate is repeated so that both databases pick
-- it.
SELECT instance_id, name, status, completed_at, NULL::JSONB FROM instances
WHERE tenant_id = @tenant_id AND status = @status AND completed_at IS NOT NULL
	AND parent_instance_id IS NULL AND retention IS NULL
	AND completed_at < @completed_before AND (completed_at, instance_id) > (@after_completed_at, @after_id)
	AND (cardinality(@names::TEXT[]) = 0 OR name = ANY(@names::TEXT[]))
	AND NOT (name = ANY(@exclude_names::TEXT[]))
ORDER BY completed_at, instance_id LIMIT @limit;

-- name: ExpiryByOverride
-- Terminal roots of one status with a retention of their own, from
-- instances_expiry_override (its predicate repeated likewise), that their
-- rule lets go at @now_ns: what they keep is their own retention's for the
-- status (@status_key, in nanoseconds), else their name's rule's
-- (@rule_keeps, an object by name), else the default's (@default_keep;
-- NULL keeps them).
SELECT instance_id, name, status, completed_at, retention FROM instances
WHERE tenant_id = @tenant_id AND completed_at IS NOT NULL
	AND parent_instance_id IS NULL AND retention IS NOT NULL AND status = @status
	AND completed_at < @completed_before AND (completed_at, instance_id) > (@after_completed_at, @after_id)
	AND completed_at * 1000000 < @now_ns::INT8 - COALESCE((retention->>@status_key::TEXT)::INT8,
		(@rule_keeps::JSONB->>name)::INT8, @default_keep::INT8)
ORDER BY completed_at, instance_id LIMIT @limit;

-- name: SummarizeTrees
-- Per root, what deleting its tree would remove, and whether every member
-- is terminal (or half deleted): the root by the primary key, the members
-- below it from instances_members.
SELECT root_instance_id, count(*), sum(execution_count)::INT8, sum(event_count)::INT8,
	bool_and(status IN ('Completed', 'Failed', 'Cancelled') OR deleting)
FROM (
	SELECT root_instance_id, execution_count, event_count, status, deleting FROM instances
	WHERE tenant_id = @tenant_id AND instance_id = ANY(@root_ids::TEXT[]) AND parent_instance_id IS NULL
	UNION ALL
	SELECT root_instance_id, execution_count, event_count, status, deleting FROM instances
	WHERE tenant_id = @tenant_id AND root_instance_id = ANY(@root_ids::TEXT[]) AND parent_instance_id IS NOT NULL
) m
GROUP BY root_instance_id;

-- name: ListChainCandidates
-- Instances with past executions (instance_prunable), by id.
SELECT p.instance_id, i.root_instance_id, i.name, i.retention
FROM instance_prunable p
JOIN instances i ON i.tenant_id = p.tenant_id AND i.instance_id = p.instance_id
WHERE p.tenant_id = @tenant_id AND p.instance_id > @after_id AND NOT i.deleting
ORDER BY p.instance_id LIMIT @limit;

-- name: CountPrunable
-- What pruning @instance_ids would take: instances seen, instances with a
-- prunable execution, executions, events. An execution is prunable by the
-- rule of PruneCandidates (prune.sql).
SELECT count(DISTINCT i.instance_id), count(DISTINCT e.instance_id), count(e.execution_id),
	COALESCE(sum(e.event_count), 0)::INT8
FROM instances i
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND (e.deleting OR (
		e.execution_id <> i.current_execution_id AND e.status <> 'Running'
		AND (@keep_last::INT8 = 0 OR e.execution_id <= i.current_execution_id - @keep_last::INT8)
		AND (@completed_before::INT8 IS NULL OR e.completed_at < @completed_before::INT8)))
WHERE i.tenant_id = @tenant_id AND i.instance_id = ANY(@instance_ids::TEXT[]) AND NOT i.deleting;

-- name: StartJanitorRun
INSERT INTO janitor_runs (tenant_id, started_at, result) VALUES (@tenant_id, @now, @result)
RETURNING run_id::TEXT;

-- name: FinishJanitorRun
UPDATE janitor_runs SET finished_at = @now, result = @result
WHERE tenant_id = @tenant_id AND run_id = @run_id::UUID;

-- name: StartAudit
-- A record that a crashed attempt left is kept as it is.
INSERT INTO audit_records (tenant_id, record_id, actor, role, action, request, started_at)
VALUES (@tenant_id, @record_id, @actor, @role, @action, @request, @started_at)
ON CONFLICT (tenant_id, record_id) DO NOTHING;

-- name: FinishAudit
-- Records how the work ended, and folds the record's tallies into its
-- result (adding to what earlier calls folded: a job done in several
-- attempts) and deletes them, in one transaction: the sum a reader sees
-- (result plus tallies) does not change, and the tallies of finished work
-- do not pile up.
WITH t AS (
	DELETE FROM audit_tallies WHERE tenant_id = @tenant_id AND record_id = @record_id
	RETURNING instances, executions, events, rows
), s AS (
	SELECT COALESCE(sum(instances), 0)::INT8 AS instances, COALESCE(sum(executions), 0)::INT8 AS executions,
		COALESCE(sum(events), 0)::INT8 AS events, COALESCE(sum(rows), 0)::INT8 AS rows
	FROM t
)
UPDATE audit_records SET finished_at = @finished_at, error = @error, result = jsonb_build_object(
	'instances', COALESCE((result->>'instances')::INT8, 0) + s.instances,
	'executions', COALESCE((result->>'executions')::INT8, 0) + s.executions,
	'events', COALESCE((result->>'events')::INT8, 0) + s.events,
	'rows', COALESCE((result->>'rows')::INT8, 0) + s.rows,
	'complete', @complete::BOOL)
FROM s
WHERE tenant_id = @tenant_id AND record_id = @record_id;

-- name: AddAuditTally
-- What one transaction of several statements removed (a piece of a big
-- instance, a prune of one instance, an erasure step), in that
-- transaction. The statements that are a whole transaction on their own
-- (DeleteInstanceRows, FinishPrune) carry this insert as a CTE instead.
INSERT INTO audit_tallies (tenant_id, record_id, root_instance_id, instances, executions, events, rows)
VALUES (@tenant_id, @record_id, @root_instance_id, @instances, @executions, @events, @rows);

-- name: GetRootTally
-- What the DeleteInstance calls under a record removed of one root's tree:
-- the record's tallies, read by its key prefix (one per transaction of
-- unfinished work).
SELECT count(*), COALESCE(sum(instances), 0)::INT8, COALESCE(sum(executions), 0)::INT8, COALESCE(sum(events), 0)::INT8
FROM audit_tallies
WHERE tenant_id = @tenant_id AND record_id = @record_id AND root_instance_id = @root_instance_id;

-- name: PruneAuditRecords
-- Up to @limit records of every tenant that started before @started_before,
-- but those of the actions kept (@keep_actions), with their tallies (a
-- record that never finished keeps its own).
WITH r AS (
	DELETE FROM audit_records WHERE (tenant_id, record_id) IN (
		SELECT tenant_id, record_id FROM audit_records
		WHERE started_at < @started_before AND NOT action = ANY(@keep_actions::TEXT[])
		ORDER BY started_at LIMIT @limit)
		AND started_at < @started_before
	RETURNING tenant_id, record_id
), t AS (
	DELETE FROM audit_tallies WHERE (tenant_id, record_id) IN (SELECT tenant_id, record_id FROM r)
	RETURNING 1
)
SELECT count(*) FROM r;
