-- Usage: what each tenant holds, measured from counters kept by the writers
-- (instance_counts, the instances' own execution and event counts) and the
-- rows waiting in its queues.

-- name: ListUsageTenants
-- A page of registered tenants by id, among @tenant_ids when it is not empty.
SELECT tenant_id FROM tenants
WHERE tenant_id > @after_tenant_id AND (cardinality(@tenant_ids::TEXT[]) = 0 OR tenant_id = ANY(@tenant_ids::TEXT[]))
ORDER BY tenant_id
LIMIT @limit;

-- name: UsageInstancesByStatus
SELECT tenant_id, status, sum(n)::INT8 FROM instance_counts
WHERE tenant_id = ANY(@tenant_ids::TEXT[])
GROUP BY tenant_id, status
HAVING sum(n) <> 0;

-- name: UsageExecutionsAndEvents
SELECT tenant_id, COALESCE(sum(execution_count), 0)::INT8, COALESCE(sum(event_count), 0)::INT8
FROM instances
WHERE tenant_id = ANY(@tenant_ids::TEXT[]) AND NOT deleting
GROUP BY tenant_id;

-- name: UsageQueuedMessages
SELECT tenant_id, sum(n)::INT8 FROM (
	SELECT tenant_id, count(*) AS n FROM orchestrator_queue WHERE tenant_id = ANY(@tenant_ids::TEXT[]) GROUP BY tenant_id
	UNION ALL
	SELECT tenant_id, count(*) AS n FROM worker_queue WHERE tenant_id = ANY(@tenant_ids::TEXT[]) GROUP BY tenant_id
) q
GROUP BY tenant_id;
