-- migrate: one transaction
ALTER INDEX instance_locks_due RENAME TO instance_leases_due;
