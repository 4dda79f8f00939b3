-- Long-running operations of the management API, by tenant and id. Every
-- read returns the columns scanOperation reads, in its order.

-- name: CreateOperation
INSERT INTO operations (tenant_id, operation_id, kind, request, state, created_at, updated_at, deadline)
VALUES (@tenant_id, @operation_id, @kind, @request, @state, @now, @now, @deadline)
ON CONFLICT (tenant_id, operation_id) DO NOTHING;

-- name: GetOperation
SELECT tenant_id, operation_id, kind, request, state, result, COALESCE(error, ''), created_at, updated_at, deadline
FROM operations
WHERE tenant_id = @tenant_id AND operation_id = @operation_id;

-- name: ListOpenOperations
-- Pending and running operations of every tenant, oldest first.
SELECT tenant_id, operation_id, kind, request, state, result, COALESCE(error, ''), created_at, updated_at, deadline
FROM operations
WHERE state IN ('pending', 'running') ORDER BY created_at LIMIT @limit;

-- name: UpdateOperation
UPDATE operations SET state = @state, result = @result, error = @error, updated_at = @now
WHERE tenant_id = @tenant_id AND operation_id = @operation_id;
