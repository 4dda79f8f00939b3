-- migrate: one transaction
ALTER INDEX instance_locks_token RENAME TO instance_leases_token;
