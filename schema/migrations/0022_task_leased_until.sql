-- When a task's lease ends.
-- migrate: one transaction
ALTER TABLE worker_queue RENAME COLUMN locked_until TO leased_until;
