-- The statements of the filter builder (filter.go), one per shape, as
-- TestFilterShapes makes them; go test ./pkg/store/crdb -run TestFilterShapes -update
-- rewrites this file.

-- ListInstances: newest first
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: oldest first
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	ORDER BY i.created_at ASC, i.instance_id ASC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at ASC, i.instance_id ASC;

-- ListInstances: updated, newest first
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.updated_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	ORDER BY i.updated_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.updated_at DESC, i.instance_id DESC;

-- ListInstances: updated, oldest first
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.updated_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	ORDER BY i.updated_at ASC, i.instance_id ASC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.updated_at ASC, i.instance_id ASC;

-- ListInstances: after a position
-- @after_id = "bil-1"
-- @after_key = 1002
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND (i.created_at, i.instance_id) < (@after_key, @after_id)
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: after a position, oldest first
-- @after_id = "ord-2"
-- @after_key = 1001
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND (i.created_at, i.instance_id) > (@after_key, @after_id)
	ORDER BY i.created_at ASC, i.instance_id ASC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at ASC, i.instance_id ASC;

-- ListInstances: instance ids
-- @instance_ids = []string{"ord-1", "bil-1", "gone"}
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.instance_id = ANY(@instance_ids::TEXT[])
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: no instance ids
-- @instance_ids = []string{}
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.instance_id = ANY(@instance_ids::TEXT[])
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: one status
-- @status = "Running"
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.status = @status
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: statuses
-- @statuses = []string{"Completed", "Failed"}
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.status = ANY(@statuses::TEXT[])
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: name
-- @name = "order"
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.name = @name
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: name prefix
-- @name_prefix = "bil"
-- @name_prefix_end = "bim"
-- @name_prefix_like = "bil%"
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.name LIKE @name_prefix_like ESCAPE '\'
	AND i.name >= @name_prefix
	AND i.name < @name_prefix_end
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: id prefix with LIKE's metacharacter
-- @id_prefix = "bil_"
-- @id_prefix_end = "bil`"
-- @id_prefix_like = "bil\\_%"
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.instance_id LIKE @id_prefix_like ESCAPE '\'
	AND i.instance_id >= @id_prefix
	AND i.instance_id < @id_prefix_end
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: id prefix without an upper bound
-- @id_prefix = "\U0010ffff"
-- @id_prefix_like = "\U0010ffff%"
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.instance_id LIKE @id_prefix_like ESCAPE '\'
	AND i.instance_id >= @id_prefix
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: created range
-- @created_after = 1001
-- @created_before = 1003
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.created_at >= @created_after
	AND i.created_at < @created_before
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: updated range
-- @created_before_bound = 1002
-- @tenant_id = "shapes"
-- @updated_after = 1000
-- @updated_before = 1002
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.updated_at >= @updated_after
	AND i.updated_at < @updated_before
	AND i.created_at < @created_before_bound
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: completed range
-- @completed_after = 0
-- @completed_before = 5000
-- @created_before_bound = 5000
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.completed_at >= @completed_after
	AND i.completed_at < @completed_before
	AND i.created_at < @created_before_bound
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: one tag, creation order
-- @tag_key = "region"
-- @tag_value = "eu"
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instance_tags g JOIN instances i ON i.tenant_id = g.tenant_id AND i.instance_id = g.instance_id
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND g.tenant_id = @tenant_id AND g.tag_key = @tag_key AND g.tag_value = @tag_value
	ORDER BY g.created_at DESC, g.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: tags, creation order
-- @other_tags = "{\"tier\":\"gold\"}"
-- @tag_key = "region"
-- @tag_value = "eu"
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instance_tags g JOIN instances i ON i.tenant_id = g.tenant_id AND i.instance_id = g.instance_id
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.tags @> @other_tags::JSONB
	AND g.tenant_id = @tenant_id AND g.tag_key = @tag_key AND g.tag_value = @tag_value
	ORDER BY g.created_at DESC, g.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: one tag, creation order, after a position
-- @after_id = "bil-1"
-- @after_key = 1002
-- @tag_key = "region"
-- @tag_value = "eu"
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instance_tags g JOIN instances i ON i.tenant_id = g.tenant_id AND i.instance_id = g.instance_id
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND g.tenant_id = @tenant_id AND g.tag_key = @tag_key AND g.tag_value = @tag_value
	AND (g.created_at, g.instance_id) < (@after_key, @after_id)
	ORDER BY g.created_at DESC, g.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: one tag, update order
-- @tag_key = "region"
-- @tag_value = "eu"
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.updated_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.instance_id IN (SELECT g.instance_id FROM instance_tags g
	WHERE g.tenant_id = @tenant_id AND g.tag_key = @tag_key AND g.tag_value = @tag_value)
	ORDER BY i.updated_at ASC, i.instance_id ASC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.updated_at ASC, i.instance_id ASC;

-- ListInstances: roots only
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.parent_instance_id IS NULL
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: children of
-- @parent_instance_id = "ord-1"
-- @tenant_id = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.parent_instance_id = @parent_instance_id
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = @tenant_id AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- CountInstances: by counters
-- @tenant_id = "shapes"
SELECT status, sum(n)::INT8 FROM instance_counts
WHERE tenant_id = @tenant_id
GROUP BY status HAVING sum(n) <> 0;

-- CountInstances: by counters, statuses
-- @statuses = []string{"Running", "Failed"}
-- @tenant_id = "shapes"
SELECT status, sum(n)::INT8 FROM instance_counts
WHERE tenant_id = @tenant_id
	AND status = ANY(@statuses::TEXT[])
GROUP BY status HAVING sum(n) <> 0;

-- CountInstances: by instances
-- @name_prefix = "ord"
-- @name_prefix_end = "ore"
-- @name_prefix_like = "ord%"
-- @tenant_id = "shapes"
SELECT i.status, count(*) FROM instances i
WHERE i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.name LIKE @name_prefix_like ESCAPE '\'
	AND i.name >= @name_prefix
	AND i.name < @name_prefix_end
GROUP BY i.status;

-- PruneExecutionsBulk candidates: any status
-- @after_id = ""
-- @after_status = ""
-- @keep_last = 0
-- @prune_completed_before = NULL
-- @tenant_id = "shapes"
SELECT p.status, p.instance_id,
	coalesce(x.execs, '{}'), coalesce(x.events, '{}'), coalesce(x.hidden, false)
FROM instance_prunable p
CROSS JOIN LATERAL (
	SELECT array_agg(e.execution_id ORDER BY e.execution_id) AS execs,
		array_agg(e.event_count ORDER BY e.execution_id) AS events,
		bool_or(e.deleting) AS hidden
	FROM (SELECT e.*, max(e.execution_id) OVER () AS current_execution_id FROM executions e
		WHERE e.tenant_id = p.tenant_id AND e.instance_id = p.instance_id) e
	WHERE (e.deleting OR (
		e.execution_id <> e.current_execution_id AND e.status <> 'Running'
		AND (@keep_last::INT8 = 0 OR e.execution_id <= e.current_execution_id - @keep_last::INT8)
		AND (@prune_completed_before::INT8 IS NULL OR e.completed_at < @prune_completed_before::INT8)))
) x
WHERE p.tenant_id = @tenant_id AND (p.status, p.instance_id) > (@after_status, @after_id)
ORDER BY p.status, p.instance_id LIMIT 10;

-- PruneExecutionsBulk candidates: one status
-- @after_id = ""
-- @keep_last = 2
-- @prune_completed_before = NULL
-- @status = "Completed"
-- @tenant_id = "shapes"
SELECT p.status, p.instance_id,
	coalesce(x.execs, '{}'), coalesce(x.events, '{}'), coalesce(x.hidden, false)
FROM instance_prunable p
CROSS JOIN LATERAL (
	SELECT array_agg(e.execution_id ORDER BY e.execution_id) AS execs,
		array_agg(e.event_count ORDER BY e.execution_id) AS events,
		bool_or(e.deleting) AS hidden
	FROM (SELECT e.*, max(e.execution_id) OVER () AS current_execution_id FROM executions e
		WHERE e.tenant_id = p.tenant_id AND e.instance_id = p.instance_id) e
	WHERE (e.deleting OR (
		e.execution_id <> e.current_execution_id AND e.status <> 'Running'
		AND (@keep_last::INT8 = 0 OR e.execution_id <= e.current_execution_id - @keep_last::INT8)
		AND (@prune_completed_before::INT8 IS NULL OR e.completed_at < @prune_completed_before::INT8)))
) x
WHERE p.tenant_id = @tenant_id AND p.status = @status AND p.instance_id > @after_id
ORDER BY p.status, p.instance_id LIMIT 10;

-- PruneExecutionsBulk candidates: statuses
-- @after_id = ""
-- @after_status = ""
-- @keep_last = 0
-- @prune_completed_before = 5000
-- @statuses = []string{"Completed", "Failed"}
-- @tenant_id = "shapes"
SELECT p.status, p.instance_id,
	coalesce(x.execs, '{}'), coalesce(x.events, '{}'), coalesce(x.hidden, false)
FROM instance_prunable p
CROSS JOIN LATERAL (
	SELECT array_agg(e.execution_id ORDER BY e.execution_id) AS execs,
		array_agg(e.event_count ORDER BY e.execution_id) AS events,
		bool_or(e.deleting) AS hidden
	FROM (SELECT e.*, max(e.execution_id) OVER () AS current_execution_id FROM executions e
		WHERE e.tenant_id = p.tenant_id AND e.instance_id = p.instance_id) e
	WHERE (e.deleting OR (
		e.execution_id <> e.current_execution_id AND e.status <> 'Running'
		AND (@keep_last::INT8 = 0 OR e.execution_id <= e.current_execution_id - @keep_last::INT8)
		AND (@prune_completed_before::INT8 IS NULL OR e.completed_at < @prune_completed_before::INT8)))
) x
WHERE p.tenant_id = @tenant_id AND (p.status, p.instance_id) > (@after_status, @after_id) AND p.status = ANY(@statuses::TEXT[])
ORDER BY p.status, p.instance_id LIMIT 10;

-- PruneExecutionsBulk candidates: a filter on the instance
-- @after_id = ""
-- @after_status = ""
-- @keep_last = 0
-- @name_prefix = "ord"
-- @name_prefix_end = "ore"
-- @name_prefix_like = "ord%"
-- @prune_completed_before = NULL
-- @tenant_id = "shapes"
SELECT p.status, p.instance_id,
	coalesce(x.execs, '{}'), coalesce(x.events, '{}'), coalesce(x.hidden, false)
FROM instance_prunable p
CROSS JOIN LATERAL (
	SELECT 1 FROM instances i
	WHERE i.instance_id = p.instance_id
	AND i.tenant_id = @tenant_id
	AND NOT i.deleting
	AND i.name LIKE @name_prefix_like ESCAPE '\'
	AND i.name >= @name_prefix
	AND i.name < @name_prefix_end
	OFFSET 0
) m
CROSS JOIN LATERAL (
	SELECT array_agg(e.execution_id ORDER BY e.execution_id) AS execs,
		array_agg(e.event_count ORDER BY e.execution_id) AS events,
		bool_or(e.deleting) AS hidden
	FROM (SELECT e.*, max(e.execution_id) OVER () AS current_execution_id FROM executions e
		WHERE e.tenant_id = p.tenant_id AND e.instance_id = p.instance_id) e
	WHERE (e.deleting OR (
		e.execution_id <> e.current_execution_id AND e.status <> 'Running'
		AND (@keep_last::INT8 = 0 OR e.execution_id <= e.current_execution_id - @keep_last::INT8)
		AND (@prune_completed_before::INT8 IS NULL OR e.completed_at < @prune_completed_before::INT8)))
) x
WHERE p.tenant_id = @tenant_id AND (p.status, p.instance_id) > (@after_status, @after_id)
ORDER BY p.status, p.instance_id LIMIT 10;

-- DeleteInstanceBulk candidates: any
-- @after_completed_at = -9223372036854775808
-- @after_id = ""
-- @tenant_id = "shapes"
SELECT i.completed_at, i.instance_id FROM instances i
WHERE i.tenant_id = @tenant_id
	AND i.parent_instance_id IS NULL
	AND i.status IN ('Completed', 'Failed', 'Cancelled')
	AND i.completed_at IS NOT NULL
	AND (i.completed_at, i.instance_id) > (@after_completed_at, @after_id)
ORDER BY i.completed_at, i.instance_id LIMIT 10;

-- DeleteInstanceBulk candidates: completed before (retention)
-- @after_completed_at = -9223372036854775808
-- @after_id = ""
-- @completed_before = 5000
-- @created_before_bound = 5000
-- @tenant_id = "shapes"
SELECT i.completed_at, i.instance_id FROM instances i
WHERE i.tenant_id = @tenant_id
	AND i.completed_at < @completed_before
	AND i.created_at < @created_before_bound
	AND i.parent_instance_id IS NULL
	AND i.status IN ('Completed', 'Failed', 'Cancelled')
	AND i.completed_at IS NOT NULL
	AND (i.completed_at, i.instance_id) > (@after_completed_at, @after_id)
ORDER BY i.completed_at, i.instance_id LIMIT 10;

-- DeleteInstanceBulk candidates: one status, a name prefix
-- @after_completed_at = -9223372036854775808
-- @after_id = ""
-- @name_prefix = "ord"
-- @name_prefix_end = "ore"
-- @name_prefix_like = "ord%"
-- @status = "Completed"
-- @tenant_id = "shapes"
SELECT i.completed_at, i.instance_id FROM instances i
WHERE i.tenant_id = @tenant_id
	AND i.status = @status
	AND i.name LIKE @name_prefix_like ESCAPE '\'
	AND i.name >= @name_prefix
	AND i.name < @name_prefix_end
	AND i.parent_instance_id IS NULL
	AND i.status IN ('Completed', 'Failed', 'Cancelled')
	AND i.completed_at IS NOT NULL
	AND (i.completed_at, i.instance_id) > (@after_completed_at, @after_id)
ORDER BY i.completed_at, i.instance_id LIMIT 10;

-- ListAuditRecords: every tenant
SELECT r.tenant_id, r.record_id, r.actor, r.role, r.action, r.request, r.result, r.started_at, r.finished_at,
	COALESCE(r.error, ''), t.instances, t.executions, t.events, t.rows
FROM (
	SELECT tenant_id, record_id, actor, role, action, request, result, started_at, finished_at, error
	FROM audit_records WHERE true ORDER BY started_at DESC, tenant_id DESC, record_id DESC LIMIT 10
) r
CROSS JOIN LATERAL (
	SELECT COALESCE(sum(instances), 0)::INT8 AS instances, COALESCE(sum(executions), 0)::INT8 AS executions,
		COALESCE(sum(events), 0)::INT8 AS events, COALESCE(sum(rows), 0)::INT8 AS rows
	FROM audit_tallies WHERE tenant_id = r.tenant_id AND record_id = r.record_id
) t
ORDER BY r.started_at DESC, r.tenant_id DESC, r.record_id DESC;

-- ListAuditRecords: one tenant, an action, a time range
-- @action = "DeleteInstance"
-- @started_after = 1000
-- @started_before = 3000
-- @tenant_id = "shapes"
SELECT r.tenant_id, r.record_id, r.actor, r.role, r.action, r.request, r.result, r.started_at, r.finished_at,
	COALESCE(r.error, ''), t.instances, t.executions, t.events, t.rows
FROM (
	SELECT tenant_id, record_id, actor, role, action, request, result, started_at, finished_at, error
	FROM audit_records WHERE tenant_id = @tenant_id
	AND action = @action
	AND started_at >= @started_after
	AND started_at < @started_before ORDER BY started_at DESC, tenant_id DESC, record_id DESC LIMIT 10
) r
CROSS JOIN LATERAL (
	SELECT COALESCE(sum(instances), 0)::INT8 AS instances, COALESCE(sum(executions), 0)::INT8 AS executions,
		COALESCE(sum(events), 0)::INT8 AS events, COALESCE(sum(rows), 0)::INT8 AS rows
	FROM audit_tallies WHERE tenant_id = r.tenant_id AND record_id = r.record_id
) t
ORDER BY r.started_at DESC, r.tenant_id DESC, r.record_id DESC;

-- ListAuditRecords: one tenant, after a position
-- @after_record_id = "rec-0"
-- @after_started_at = 2000
-- @tenant_id = "shapes"
SELECT r.tenant_id, r.record_id, r.actor, r.role, r.action, r.request, r.result, r.started_at, r.finished_at,
	COALESCE(r.error, ''), t.instances, t.executions, t.events, t.rows
FROM (
	SELECT tenant_id, record_id, actor, role, action, request, result, started_at, finished_at, error
	FROM audit_records WHERE tenant_id = @tenant_id
	AND (started_at, record_id) < (@after_started_at, @after_record_id) ORDER BY started_at DESC, tenant_id DESC, record_id DESC LIMIT 10
) r
CROSS JOIN LATERAL (
	SELECT COALESCE(sum(instances), 0)::INT8 AS instances, COALESCE(sum(executions), 0)::INT8 AS executions,
		COALESCE(sum(events), 0)::INT8 AS events, COALESCE(sum(rows), 0)::INT8 AS rows
	FROM audit_tallies WHERE tenant_id = r.tenant_id AND record_id = r.record_id
) t
ORDER BY r.started_at DESC, r.tenant_id DESC, r.record_id DESC;

-- ListAuditRecords: every tenant, after a position
-- @after_record_id = "rec-1"
-- @after_started_at = 2001
-- @after_tenant_id = "shapes-other"
SELECT r.tenant_id, r.record_id, r.actor, r.role, r.action, r.request, r.result, r.started_at, r.finished_at,
	COALESCE(r.error, ''), t.instances, t.executions, t.events, t.rows
FROM (
	SELECT tenant_id, record_id, actor, role, action, request, result, started_at, finished_at, error
	FROM audit_records WHERE (started_at, tenant_id, record_id) < (@after_started_at, @after_tenant_id, @after_record_id) ORDER BY started_at DESC, tenant_id DESC, record_id DESC LIMIT 10
) r
CROSS JOIN LATERAL (
	SELECT COALESCE(sum(instances), 0)::INT8 AS instances, COALESCE(sum(executions), 0)::INT8 AS executions,
		COALESCE(sum(events), 0)::INT8 AS events, COALESCE(sum(rows), 0)::INT8 AS rows
	FROM audit_tallies WHERE tenant_id = r.tenant_id AND record_id = r.record_id
) t
ORDER BY r.started_at DESC, r.tenant_id DESC, r.record_id DESC;

-- ListJanitorRuns: every tenant
SELECT tenant_id, run_id::TEXT, started_at, finished_at, result FROM janitor_runs
WHERE true ORDER BY started_at DESC, tenant_id DESC, run_id DESC LIMIT 10;

-- ListJanitorRuns: one tenant
-- @tenant_id = "shapes"
SELECT tenant_id, run_id::TEXT, started_at, finished_at, result FROM janitor_runs
WHERE tenant_id = @tenant_id ORDER BY started_at DESC, tenant_id DESC, run_id DESC LIMIT 10;

-- ListJanitorRuns: after a position
-- @after_run_id = "a run id"
-- @after_started_at = 1005
-- @after_tenant_id = "shapes-other"
SELECT tenant_id, run_id::TEXT, started_at, finished_at, result FROM janitor_runs
WHERE (started_at, tenant_id, run_id) < (@after_started_at, @after_tenant_id, @after_run_id::UUID) ORDER BY started_at DESC, tenant_id DESC, run_id DESC LIMIT 10;
