-- Tenants: their state, limits and retention policy. The reads return the
-- columns scanTenant reads, in its order.

-- name: CreateTenant
INSERT INTO tenants (tenant_id, created_at, updated_at) VALUES (@tenant_id, @now, @now)
ON CONFLICT (tenant_id) DO NOTHING;

-- name: GetTenant
SELECT tenant_id, state, limits, retention, created_at, updated_at FROM tenants
WHERE tenant_id = @tenant_id;

-- name: ListTenants
SELECT tenant_id, state, limits, retention, created_at, updated_at FROM tenants
WHERE tenant_id > @after_tenant_id
ORDER BY tenant_id
LIMIT @limit;

-- name: UpdateTenant
-- A NULL parameter leaves its column as it is.
UPDATE tenants SET state = COALESCE(@state, state), limits = COALESCE(@limits::JSONB, limits),
	retention = COALESCE(@retention::JSONB, retention), updated_at = @now
WHERE tenant_id = @tenant_id
RETURNING tenant_id, state, limits, retention, created_at, updated_at;
