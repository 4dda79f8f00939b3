-- Orchestration definitions: one row per (tenant, name, version).

-- name: RegisterDefinition
-- Inserts a version, or finds it registered: true when the document stored
-- is the same one (a no-op), false when it is another. One statement, so
-- the insert and the comparison see the same row.
WITH ins AS (
	INSERT INTO definitions (tenant_id, name, version, body, created_at)
	VALUES (@tenant_id, @name, @version, @body, @now)
	ON CONFLICT (tenant_id, name, version) DO NOTHING
	RETURNING created_at
)
SELECT true, true, created_at FROM ins
UNION ALL
SELECT false, body = @body::JSONB, created_at FROM definitions
WHERE tenant_id = @tenant_id AND name = @name AND version = @version AND NOT EXISTS (SELECT 1 FROM ins);

-- name: GetDefinitionVersion
SELECT name, version, body, created_at FROM definitions
WHERE tenant_id = @tenant_id AND name = @name AND version = @version;

-- name: GetDefinitionLatest
-- The version registered last.
SELECT name, version, body, created_at FROM definitions
WHERE tenant_id = @tenant_id AND name = @name
ORDER BY created_at DESC, version DESC
LIMIT 1;

-- name: ListDefinitions
-- Versions by name, newest first within a name, with their documents when
-- @with_documents: keyset on (name ASC, created_at DESC, version DESC),
-- resumed after the version @after_version of @after_name ('' for the first
-- page); @name ('' for all) keeps one name.
SELECT d.name, d.version, CASE WHEN @with_documents::BOOL THEN d.body END, d.created_at FROM definitions d
WHERE d.tenant_id = @tenant_id AND (@name = '' OR d.name = @name)
	AND (@after_name = '' OR d.name > @after_name OR (d.name = @after_name AND (d.created_at, d.version) <
		(SELECT a.created_at, a.version FROM definitions a
		 WHERE a.tenant_id = @tenant_id AND a.name = @after_name AND a.version = @after_version)))
ORDER BY d.name, d.created_at DESC, d.version DESC
LIMIT @limit;
