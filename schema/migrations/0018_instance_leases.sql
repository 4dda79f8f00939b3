-- instance_locks holds each instance's lease and due schedule, not locks:
-- it is instance_leases from here on (0018 to 0024 rename what said
-- "lock"). A rename cannot be written to run twice on both databases, so
-- each is a migration of its own, applied in one transaction with the
-- record of its version.
-- migrate: one transaction
ALTER TABLE instance_locks RENAME TO instance_leases;
