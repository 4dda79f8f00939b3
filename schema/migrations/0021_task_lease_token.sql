-- The token of the worker holding an activity task.
-- migrate: one transaction
ALTER TABLE worker_queue RENAME COLUMN lock_token TO lease_token;
