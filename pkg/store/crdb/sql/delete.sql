-- Deleting whole instances: the check of a batch of trees, then one
-- statement that removes what the trees own.

-- name: TreeMembers
-- Every member of these trees, with what deleting it costs and owns: the
-- rows it takes (instance, executions, history, queued messages), whether it
-- still runs, and whether it has tags or a prunable row (an instance half
-- deleted, too big for one transaction, may have anything). Roots are judged
-- again here, in the delete's transaction: a root whose completion time is
-- not the one it was chosen by has been replaced since.
SELECT i.root_instance_id, i.instance_id, i.completed_at,
	i.status IN ('Completed', 'Failed', 'Cancelled'),
	i.status = 'Running', i.deleting,
	i.execution_count, i.event_count, i.tags <> '{}'::JSONB,
	(SELECT count(*) FROM orchestrator_queue q WHERE q.tenant_id = @tenant_id AND q.instance_id = i.instance_id),
	(SELECT count(*) FROM worker_queue w WHERE w.tenant_id = @tenant_id AND w.instance_id = i.instance_id)
FROM instances i
WHERE i.tenant_id = @tenant_id AND i.root_instance_id = ANY(@roots::TEXT[]);

-- name: DeleteInstanceRows
-- Removes instances with everything they own, touching each table once, and
-- takes the visible ones off the status counters. Tags, prunable rows and
-- queued messages are looked for only under the instances known to have
-- them (every instance has executions, history and a lease row): a lookup
-- that finds nothing costs as much as one that finds a row.
WITH h AS (
	DELETE FROM history WHERE tenant_id = @tenant_id AND instance_id = ANY(@ids::TEXT[]) RETURNING 1
), e AS (
	DELETE FROM executions WHERE tenant_id = @tenant_id AND instance_id = ANY(@ids::TEXT[]) RETURNING 1
), oq AS (
	DELETE FROM orchestrator_queue WHERE tenant_id = @tenant_id AND instance_id = ANY(@orchestrator_queued::TEXT[]) RETURNING 1
), wq AS (
	DELETE FROM worker_queue WHERE tenant_id = @tenant_id AND instance_id = ANY(@worker_queued::TEXT[]) RETURNING 1
), l AS (
	DELETE FROM instance_locks WHERE tenant_id = @tenant_id AND instance_id = ANY(@ids::TEXT[]) RETURNING 1
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
)
SELECT (SELECT count(*) FROM i), (SELECT count(*) FROM e), (SELECT count(*) FROM h),
	(SELECT count(*) FROM oq), (SELECT count(*) FROM wq);
