-- Deleting whole instances: the check of a batch of trees, then one
-- statement that removes what the trees own.

-- name: TreeMembers
-- Every member of these trees, with what deleting it costs and owns: the
-- rows it takes (instance, executions, history, queued messages), whether it
-- still runs, and whether it has tags or a prunable row (an instance half
-- deleted, too big for one transaction, may have anything). Roots are judged
-- again here, in the delete's transaction: a root whose completion time is
-- not the one it was chosen by has been replaced since. The roots' rows are
-- read by the primary key, whose pages the delete then finds in memory, and
-- the members below them from instances_members.
SELECT i.root_instance_id, i.instance_id, i.completed_at,
	i.status IN ('Completed', 'Failed', 'Cancelled'),
	i.status = 'Running', i.deleting,
	i.execution_count, i.event_count, i.tags <> '{}'::JSONB,
	(SELECT count(*) FROM orchestrator_queue q WHERE q.tenant_id = @tenant_id AND q.instance_id = i.instance_id),
	(SELECT count(*) FROM worker_queue w WHERE w.tenant_id = @tenant_id AND w.instance_id = i.instance_id)
FROM (
	SELECT root_instance_id, instance_id, completed_at, status, deleting, execution_count, event_count, tags FROM instances
	WHERE tenant_id = @tenant_id AND instance_id = ANY(@roots::TEXT[]) AND parent_instance_id IS NULL
	UNION ALL
	SELECT root_instance_id, instance_id, completed_at, status, deleting, execution_count, event_count, tags FROM instances
	WHERE tenant_id = @tenant_id AND root_instance_id = ANY(@roots::TEXT[]) AND parent_instance_id IS NOT NULL
) i;

-- name: DeleteInstanceRows
-- Removes instances with everything they own, touching each table once, and
-- takes the visible ones off the status counters. Tags, prunable rows and
-- queued messages are looked for only under the instances known to have
-- them (every instance has executions and history): a lookup that finds
-- nothing costs as much as one that finds a row. Lease rows are looked for
-- under every instance: an ended one has none (AckDropEnded in
-- ack.sql) unless an earlier version left it, which nothing else tells,
-- and the table holds only the instances that can still need a turn, so
-- the lookup reads pages that are in memory.
WITH h AS (
	DELETE FROM history WHERE tenant_id = @tenant_id AND instance_id = ANY(@ids::TEXT[]) RETURNING 1
), e AS (
	DELETE FROM executions WHERE tenant_id = @tenant_id AND instance_id = ANY(@ids::TEXT[]) RETURNING 1
), oq AS (
	DELETE FROM orchestrator_queue WHERE tenant_id = @tenant_id AND instance_id = ANY(@orchestrator_queued::TEXT[]) RETURNING 1
), wq AS (
	DELETE FROM worker_queue WHERE tenant_id = @tenant_id AND instance_id = ANY(@worker_queued::TEXT[]) RETURNING 1
), l AS (
	DELETE FROM instance_leases WHERE tenant_id = @tenant_id AND instance_id = ANY(@ids::TEXT[]) RETURNING 1
), tg AS (
	DELETE FROM instance_tags WHERE tenant_id = @tenant_id AND instance_id = ANY(@tagged::TEXT[]) RETURNING 1
), pr AS (
	DELETE FROM instance_prunable WHERE tenant_id = @tenant_id AND instance_id = ANY(@prunable::TEXT[]) RETURNING 1
), i AS (
	DELETE FROM instances WHERE tenant_id = @tenant_id AND instance_id = ANY(@ids::TEXT[]) RETURNING status, deleting
), counted AS (
	INSERT INTO instance_counts (tenant_id, status, shard, n)
	SELECT @tenant_id, status, @shard, -count(*) FROM i WHERE NOT deleting GROUP BY status ORDER BY status
	ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n
	RETURNING 1
), tally AS (
	INSERT INTO audit_tallies (tenant_id, record_id, root_instance_id, instances, executions, events)
	SELECT @tenant_id, @audit_record_id::TEXT, @audit_root::TEXT, (SELECT count(*) FROM i), (SELECT count(*) FROM e), (SELECT count(*) FROM h)
	WHERE @audit_record_id::TEXT <> ''
	RETURNING 1
)
SELECT (SELECT count(*) FROM i), (SELECT count(*) FROM e), (SELECT count(*) FROM h),
	(SELECT count(*) FROM oq), (SELECT count(*) FROM wq);

-- name: AtomicDeleteCheck
-- DeleteInstancesAtomic's check of @ids, before DeleteInstanceRows: per
-- instance, whether it runs, the rows deleting it takes (instance,
-- executions, history, queued messages), and a child outside the set, if
-- any (deleting the set would orphan it).
SELECT i.instance_id, i.status = 'Running' AND NOT i.deleting,
	1 + i.execution_count + i.event_count
	+ (SELECT count(*) FROM orchestrator_queue q WHERE q.tenant_id = @tenant_id AND q.instance_id = i.instance_id)
	+ (SELECT count(*) FROM worker_queue w WHERE w.tenant_id = @tenant_id AND w.instance_id = i.instance_id),
	(SELECT c.instance_id FROM instances c
		WHERE c.tenant_id = @tenant_id AND c.parent_instance_id = i.instance_id AND NOT (c.instance_id = ANY(@ids::TEXT[]))
		LIMIT 1)
FROM instances i WHERE i.tenant_id = @tenant_id AND i.instance_id = ANY(@ids::TEXT[]);

-- name: DeletePieceQueues
-- A piece of an instance too big to delete in one transaction
-- (DeleteInstance) starts here: queue rows and lease, then, while the
-- transaction's budget lasts, history (DeletePieceHistory), then the
-- executions left without history (DeletePieceExecutions). It hides the
-- instance (deleting) and takes it off the status counters, once: reads no
-- longer see it, fetches treat its messages as zombies, and no execution is
-- ever seen without its history; its id stays taken until
-- DeleteInstanceRows removes its row. Removes its lease and up to @limit
-- rows of each queue.
WITH hide AS (
	UPDATE instances SET deleting = true
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND NOT deleting
	RETURNING status
), counted AS (
	INSERT INTO instance_counts (tenant_id, status, shard, n)
	SELECT @tenant_id, status, @shard, -1 FROM hide
	ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n
	RETURNING 1
), l AS (
	DELETE FROM instance_leases WHERE tenant_id = @tenant_id AND instance_id = @instance_id RETURNING 1
), oq AS (
	DELETE FROM orchestrator_queue WHERE (tenant_id, instance_id, id) IN (
		SELECT tenant_id, instance_id, id FROM orchestrator_queue
		WHERE tenant_id = @tenant_id AND instance_id = @instance_id LIMIT @limit)
	RETURNING 1
), wq AS (
	DELETE FROM worker_queue WHERE (tenant_id, id) IN (
		SELECT tenant_id, id FROM worker_queue
		WHERE tenant_id = @tenant_id AND instance_id = @instance_id LIMIT @limit)
	RETURNING 1
)
SELECT (SELECT count(*) FROM oq), (SELECT count(*) FROM wq), (SELECT count(*) FROM l);

-- name: DeletePieceHistory
-- Up to @limit history events of a hidden instance, in key order, and its
-- event counter.
WITH h AS (
	DELETE FROM history WHERE (tenant_id, instance_id, execution_id, event_id) IN (
		SELECT tenant_id, instance_id, execution_id, event_id FROM history
		WHERE tenant_id = @tenant_id AND instance_id = @instance_id
		ORDER BY execution_id, event_id LIMIT @limit)
	RETURNING 1
), counted AS (
	UPDATE instances SET event_count = event_count - (SELECT count(*) FROM h)
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id
	RETURNING 1
)
SELECT count(*) FROM h;

-- name: DeletePieceExecutions
-- Up to @limit executions of a hidden instance whose history is gone, and
-- its execution counter.
WITH e AS (
	DELETE FROM executions WHERE (tenant_id, instance_id, execution_id) IN (
		SELECT tenant_id, instance_id, execution_id FROM executions
		WHERE tenant_id = @tenant_id AND instance_id = @instance_id
		ORDER BY execution_id LIMIT @limit)
	RETURNING 1
), counted AS (
	UPDATE instances SET execution_count = execution_count - (SELECT count(*) FROM e)
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id
	RETURNING 1
)
SELECT count(*) FROM e;
