-- Management: listing indexes (one per order and per selective filter) and
-- the tombstone of an instance too big to delete in one transaction.

-- An instance being deleted over several transactions: invisible to reads,
-- never fetched, its id not yet free.
ALTER TABLE instances ADD COLUMN IF NOT EXISTS deleting BOOL NOT NULL DEFAULT false;

-- An execution being pruned over several transactions: hidden the same way.
ALTER TABLE executions ADD COLUMN IF NOT EXISTS deleting BOOL NOT NULL DEFAULT false;

-- Bulk deletes gather whole trees by their root.
CREATE INDEX IF NOT EXISTS instances_root ON instances (tenant_id, root_instance_id);

-- ListInstances ordered by creation or update, with keyset pagination.
CREATE INDEX IF NOT EXISTS instances_created ON instances (tenant_id, created_at, instance_id);

CREATE INDEX IF NOT EXISTS instances_updated ON instances (tenant_id, updated_at, instance_id);

-- Status filters (the console's default views) and counts by status.
CREATE INDEX IF NOT EXISTS instances_status_created ON instances (tenant_id, status, created_at, instance_id);

-- Name and name-prefix filters.
CREATE INDEX IF NOT EXISTS instances_name_created ON instances (tenant_id, name, created_at, instance_id);

-- Retention: terminal instances by completion time.
CREATE INDEX IF NOT EXISTS instances_completed ON instances (tenant_id, completed_at, instance_id)
    WHERE completed_at IS NOT NULL;
