-- Erasing a tenant (EraseTenantRows): up to @limit of its rows of one
-- table per statement, one statement per table, in the order of
-- tenantTables (janitor.go): what refers to an instance before the
-- instance, the tenant's row, then its audit records' tallies and its audit
-- records last, all but the tombstone's (@keep_record_id).

-- name: EraseHistory
DELETE FROM history WHERE tenant_id = @tenant_id AND (instance_id, execution_id, event_id) IN (
	SELECT instance_id, execution_id, event_id FROM history WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseExecutions
DELETE FROM executions WHERE tenant_id = @tenant_id AND (instance_id, execution_id) IN (
	SELECT instance_id, execution_id FROM executions WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseOrchestratorQueue
DELETE FROM orchestrator_queue WHERE tenant_id = @tenant_id AND (instance_id, id) IN (
	SELECT instance_id, id FROM orchestrator_queue WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseWorkerQueue
DELETE FROM worker_queue WHERE tenant_id = @tenant_id AND id IN (
	SELECT id FROM worker_queue WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseInstanceLeases
DELETE FROM instance_leases WHERE tenant_id = @tenant_id AND instance_id IN (
	SELECT instance_id FROM instance_leases WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseInstanceTags
DELETE FROM instance_tags WHERE tenant_id = @tenant_id AND (instance_id, tag_key) IN (
	SELECT instance_id, tag_key FROM instance_tags WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseInstancePrunable
DELETE FROM instance_prunable WHERE tenant_id = @tenant_id AND instance_id IN (
	SELECT instance_id FROM instance_prunable WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseInstanceCounts
DELETE FROM instance_counts WHERE tenant_id = @tenant_id AND (status, shard) IN (
	SELECT status, shard FROM instance_counts WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseInstances
DELETE FROM instances WHERE tenant_id = @tenant_id AND instance_id IN (
	SELECT instance_id FROM instances WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseDefinitions
DELETE FROM definitions WHERE tenant_id = @tenant_id AND (name, version) IN (
	SELECT name, version FROM definitions WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseOperations
DELETE FROM operations WHERE tenant_id = @tenant_id AND operation_id IN (
	SELECT operation_id FROM operations WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseJanitorRuns
DELETE FROM janitor_runs WHERE tenant_id = @tenant_id AND run_id IN (
	SELECT run_id FROM janitor_runs WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseTenant
DELETE FROM tenants WHERE tenant_id = @tenant_id AND tenant_id IN (
	SELECT tenant_id FROM tenants WHERE tenant_id = @tenant_id LIMIT @limit);

-- name: EraseAuditTallies
DELETE FROM audit_tallies WHERE tenant_id = @tenant_id AND (record_id, tally_id) IN (
	SELECT record_id, tally_id FROM audit_tallies WHERE tenant_id = @tenant_id AND record_id <> @keep_record_id LIMIT @limit)
	AND record_id <> @keep_record_id;

-- name: EraseAuditRecords
DELETE FROM audit_records WHERE tenant_id = @tenant_id AND record_id IN (
	SELECT record_id FROM audit_records WHERE tenant_id = @tenant_id AND record_id <> @keep_record_id LIMIT @limit)
	AND record_id <> @keep_record_id;
