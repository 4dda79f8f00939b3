-- When the lease ends (0: nobody holds it).
-- migrate: one transaction
ALTER TABLE instance_leases RENAME COLUMN locked_until TO leased_until;
