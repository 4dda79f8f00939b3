-- The token of the dispatcher holding the lease.
-- migrate: one transaction
ALTER TABLE instance_leases RENAME COLUMN lock_token TO lease_token;
