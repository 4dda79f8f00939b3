-- The primary key of instance_leases kept the table's first name through
-- the renames of 0018 to 0024; an index name is what EXPLAIN and lock
-- waits show, so it says leases too.
-- migrate: one transaction
ALTER INDEX instance_locks_pkey RENAME TO instance_leases_pkey;
