-- Reads and counter upkeep for the management API. The filtered list and
-- count are built at run time from the filter (filter.go); their shapes
-- are in testdata/filter_shapes.sql.

-- name: RecountClear
-- RecountInstances, first statement: a tenant's counters go.
DELETE FROM instance_counts WHERE tenant_id = @tenant_id;

-- name: RecountInstances
-- RecountInstances, second statement, in the same SERIALIZABLE
-- transaction: one row per status (shard 0) holding its count.
INSERT INTO instance_counts (tenant_id, status, shard, n)
SELECT @tenant_id, status, 0, count(*) FROM instances
WHERE tenant_id = @tenant_id AND NOT deleting
GROUP BY status;

-- name: ListExecutions
-- An instance's stored executions, oldest first; one row of NULLs when it
-- has none (so that a missing instance, no row, is told apart).
SELECT e.execution_id, e.status, e.input, e.output, COALESCE(e.error, ''), e.started_at, e.completed_at, e.event_count
FROM instances i
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND NOT e.deleting
WHERE i.tenant_id = @tenant_id AND i.instance_id = @instance_id AND NOT i.deleting
ORDER BY e.execution_id;

-- name: ListChildren
-- In index order (creation); the caller sorts the ids, which in Go is far
-- cheaper than in the database.
SELECT instance_id FROM instances
WHERE tenant_id = @tenant_id AND parent_instance_id = @instance_id AND NOT deleting;

-- name: GetParentID
SELECT COALESCE(parent_instance_id, '') FROM instances
WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND NOT deleting;

-- name: WalkTree
-- For a delete: an instance and its descendants down to @max_depth (one
-- level more than allowed, so that a deeper tree is seen and refused),
-- deepest first, with the rows deleting each costs (instance, executions,
-- events, queue rows). It includes the instances an interrupted delete
-- hid, which reads never show.
WITH RECURSIVE tree (instance_id, parent_instance_id, depth) AS (
	SELECT instance_id, COALESCE(parent_instance_id, ''), 0 FROM instances
	WHERE tenant_id = @tenant_id AND instance_id = @instance_id
	UNION ALL
	SELECT c.instance_id, c.parent_instance_id, t.depth + 1
	FROM tree t JOIN instances c ON c.tenant_id = @tenant_id AND c.parent_instance_id = t.instance_id
	WHERE t.depth < @max_depth
)
SELECT t.instance_id, t.parent_instance_id, t.depth, i.status = 'Running', i.deleting,
	1 + i.execution_count + i.event_count
	+ (SELECT count(*) FROM orchestrator_queue q WHERE q.tenant_id = @tenant_id AND q.instance_id = t.instance_id)
	+ (SELECT count(*) FROM worker_queue w WHERE w.tenant_id = @tenant_id AND w.instance_id = t.instance_id)
FROM tree t JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = t.instance_id
ORDER BY t.depth DESC, t.instance_id;

-- name: GetInstanceTree
-- The whole tree an instance belongs to, by its root: the root's row, and
-- the members below it in one range of the index instances_members, walked
-- in Go (a recursive query would probe the index once per instance, leaves
-- included; docs/decisions/store-trees-by-root.md).
WITH r AS (
	SELECT root_instance_id FROM instances WHERE tenant_id = @tenant_id AND instance_id = @instance_id AND NOT deleting
)
SELECT instance_id, '' FROM instances
WHERE tenant_id = @tenant_id AND NOT deleting AND parent_instance_id IS NULL AND instance_id = (SELECT root_instance_id FROM r)
UNION ALL
SELECT instance_id, parent_instance_id FROM instances
WHERE tenant_id = @tenant_id AND NOT deleting AND parent_instance_id IS NOT NULL AND root_instance_id = (SELECT root_instance_id FROM r);
