-- The members of a tree below its root, by the tree's root: what deleting,
-- summarizing or walking a tree reads after the root's own row, which they
-- read by the primary key. Roots (parent_instance_id IS NULL, the most
-- instances by far) are not in it, so a start adds no entry here and a
-- delete reads no page of it for a tree that is its root alone.
CREATE INDEX IF NOT EXISTS instances_members ON instances (tenant_id, root_instance_id) WHERE parent_instance_id IS NOT NULL;

DROP INDEX IF EXISTS instances_root;
