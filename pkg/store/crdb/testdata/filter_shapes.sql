-- The statements of the filter builder (filter.go), one per shape, as
-- TestFilterShapes makes them; go test ./pkg/store/crdb -run TestFilterShapes -update
-- rewrites this file.

-- ListInstances: newest first
-- $1 = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: oldest first
-- $1 = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	ORDER BY i.created_at ASC, i.instance_id ASC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at ASC, i.instance_id ASC;

-- ListInstances: updated, newest first
-- $1 = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.updated_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	ORDER BY i.updated_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.updated_at DESC, i.instance_id DESC;

-- ListInstances: updated, oldest first
-- $1 = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.updated_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	ORDER BY i.updated_at ASC, i.instance_id ASC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.updated_at ASC, i.instance_id ASC;

-- ListInstances: after a position
-- $1 = "shapes"
-- $2 = 1002
-- $3 = "bil-1"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND (i.created_at, i.instance_id) < ($2, $3)
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: after a position, oldest first
-- $1 = "shapes"
-- $2 = 1001
-- $3 = "ord-2"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND (i.created_at, i.instance_id) > ($2, $3)
	ORDER BY i.created_at ASC, i.instance_id ASC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at ASC, i.instance_id ASC;

-- ListInstances: instance ids
-- $1 = "shapes"
-- $2 = []string{"ord-1", "bil-1", "gone"}
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.instance_id = ANY($2::TEXT[])
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: no instance ids
-- $1 = "shapes"
-- $2 = []string{}
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.instance_id = ANY($2::TEXT[])
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: one status
-- $1 = "shapes"
-- $2 = "Running"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.status = $2
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: statuses
-- $1 = "shapes"
-- $2 = []string{"Completed", "Failed"}
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.status = ANY($2::TEXT[])
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: name
-- $1 = "shapes"
-- $2 = "order"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.name = $2
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: name prefix
-- $1 = "shapes"
-- $2 = "bil%"
-- $3 = "bil"
-- $4 = "bim"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.name LIKE $2 ESCAPE '\'
	AND i.name >= $3
	AND i.name < $4
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: id prefix with LIKE's metacharacter
-- $1 = "shapes"
-- $2 = "bil\\_%"
-- $3 = "bil_"
-- $4 = "bil`"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.instance_id LIKE $2 ESCAPE '\'
	AND i.instance_id >= $3
	AND i.instance_id < $4
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: id prefix without an upper bound
-- $1 = "shapes"
-- $2 = "\U0010ffff%"
-- $3 = "\U0010ffff"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.instance_id LIKE $2 ESCAPE '\'
	AND i.instance_id >= $3
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: created range
-- $1 = "shapes"
-- $2 = 1001
-- $3 = 1003
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.created_at >= $2
	AND i.created_at < $3
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: updated range
-- $1 = "shapes"
-- $2 = 1000
-- $3 = 1002
-- $4 = 1002
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.updated_at >= $2
	AND i.updated_at < $3
	AND i.created_at < $4
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: completed range
-- $1 = "shapes"
-- $2 = 0
-- $3 = 5000
-- $4 = 5000
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.completed_at >= $2
	AND i.completed_at < $3
	AND i.created_at < $4
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: one tag, creation order
-- $1 = "shapes"
-- $2 = "region"
-- $3 = "eu"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instance_tags g JOIN instances i ON i.tenant_id = g.tenant_id AND i.instance_id = g.instance_id
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND g.tenant_id = $1 AND g.tag_key = $2 AND g.tag_value = $3
	ORDER BY g.created_at DESC, g.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: tags, creation order
-- $1 = "shapes"
-- $2 = "{\"tier\":\"gold\"}"
-- $3 = "region"
-- $4 = "eu"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instance_tags g JOIN instances i ON i.tenant_id = g.tenant_id AND i.instance_id = g.instance_id
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.tags @> $2::JSONB
	AND g.tenant_id = $1 AND g.tag_key = $3 AND g.tag_value = $4
	ORDER BY g.created_at DESC, g.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: one tag, creation order, after a position
-- $1 = "shapes"
-- $2 = "region"
-- $3 = "eu"
-- $4 = 1002
-- $5 = "bil-1"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instance_tags g JOIN instances i ON i.tenant_id = g.tenant_id AND i.instance_id = g.instance_id
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND g.tenant_id = $1 AND g.tag_key = $2 AND g.tag_value = $3
	AND (g.created_at, g.instance_id) < ($4, $5)
	ORDER BY g.created_at DESC, g.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: one tag, update order
-- $1 = "shapes"
-- $2 = "region"
-- $3 = "eu"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.updated_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.instance_id IN (SELECT g.instance_id FROM instance_tags g
	WHERE g.tenant_id = $1 AND g.tag_key = $2 AND g.tag_value = $3)
	ORDER BY i.updated_at ASC, i.instance_id ASC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.updated_at ASC, i.instance_id ASC;

-- ListInstances: roots only
-- $1 = "shapes"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.parent_instance_id IS NULL
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- ListInstances: children of
-- $1 = "shapes"
-- $2 = "ord-1"
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.created_at
FROM (
	SELECT i.instance_id FROM instances i
	WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.parent_instance_id = $2
	ORDER BY i.created_at DESC, i.instance_id DESC
	LIMIT 11
) page
JOIN instances i ON i.tenant_id = $1 AND i.instance_id = page.instance_id
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
ORDER BY i.created_at DESC, i.instance_id DESC;

-- CountInstances: by counters
-- $1 = "shapes"
SELECT status, sum(n)::INT8 FROM instance_counts
WHERE tenant_id = $1
GROUP BY status HAVING sum(n) <> 0;

-- CountInstances: by counters, statuses
-- $1 = "shapes"
-- $2 = []string{"Running", "Failed"}
SELECT status, sum(n)::INT8 FROM instance_counts
WHERE tenant_id = $1
	AND status = ANY($2::TEXT[])
GROUP BY status HAVING sum(n) <> 0;

-- CountInstances: by instances
-- $1 = "shapes"
-- $2 = "ord%"
-- $3 = "ord"
-- $4 = "ore"
SELECT i.status, count(*) FROM instances i
WHERE i.tenant_id = $1
	AND NOT i.deleting
	AND i.name LIKE $2 ESCAPE '\'
	AND i.name >= $3
	AND i.name < $4
GROUP BY i.status;

-- PruneExecutionsBulk candidates: any status
-- $1 = "shapes"
-- $2 = ""
-- $3 = ""
-- $4 = 0
-- $5 = NULL
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
		AND ($4::INT8 = 0 OR e.execution_id <= e.current_execution_id - $4::INT8)
		AND ($5::INT8 IS NULL OR e.completed_at < $5::INT8)))
) x
WHERE p.tenant_id = $1 AND (p.status, p.instance_id) > ($2, $3)
ORDER BY p.status, p.instance_id LIMIT 10;

-- PruneExecutionsBulk candidates: one status
-- $1 = "shapes"
-- $2 = "Completed"
-- $3 = ""
-- $4 = 2
-- $5 = NULL
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
		AND ($4::INT8 = 0 OR e.execution_id <= e.current_execution_id - $4::INT8)
		AND ($5::INT8 IS NULL OR e.completed_at < $5::INT8)))
) x
WHERE p.tenant_id = $1 AND p.status = $2 AND p.instance_id > $3
ORDER BY p.status, p.instance_id LIMIT 10;

-- PruneExecutionsBulk candidates: statuses
-- $1 = "shapes"
-- $2 = ""
-- $3 = ""
-- $4 = []string{"Completed", "Failed"}
-- $5 = 0
-- $6 = 5000
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
		AND ($5::INT8 = 0 OR e.execution_id <= e.current_execution_id - $5::INT8)
		AND ($6::INT8 IS NULL OR e.completed_at < $6::INT8)))
) x
WHERE p.tenant_id = $1 AND (p.status, p.instance_id) > ($2, $3) AND p.status = ANY($4::TEXT[])
ORDER BY p.status, p.instance_id LIMIT 10;

-- PruneExecutionsBulk candidates: a filter on the instance
-- $1 = "shapes"
-- $2 = ""
-- $3 = ""
-- $4 = 0
-- $5 = NULL
-- $6 = "shapes"
-- $7 = "ord%"
-- $8 = "ord"
-- $9 = "ore"
SELECT p.status, p.instance_id,
	coalesce(x.execs, '{}'), coalesce(x.events, '{}'), coalesce(x.hidden, false)
FROM instance_prunable p
CROSS JOIN LATERAL (
	SELECT 1 FROM instances i
	WHERE i.instance_id = p.instance_id
	AND i.tenant_id = $6
	AND NOT i.deleting
	AND i.name LIKE $7 ESCAPE '\'
	AND i.name >= $8
	AND i.name < $9
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
		AND ($4::INT8 = 0 OR e.execution_id <= e.current_execution_id - $4::INT8)
		AND ($5::INT8 IS NULL OR e.completed_at < $5::INT8)))
) x
WHERE p.tenant_id = $1 AND (p.status, p.instance_id) > ($2, $3)
ORDER BY p.status, p.instance_id LIMIT 10;
