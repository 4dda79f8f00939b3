-- Every instance has its lease row from creation to deletion: a free lease
-- has locked_until = 0. Claims then update rows that exist, which lets them
-- skip rows another claim is taking (FOR UPDATE SKIP LOCKED) instead of
-- queueing behind it; compare-and-set on the row keeps them correct.
INSERT INTO instance_locks (tenant_id, instance_id, lock_token, locked_until)
SELECT tenant_id, instance_id, gen_random_uuid(), 0 FROM instances
ON CONFLICT (tenant_id, instance_id) DO NOTHING;
