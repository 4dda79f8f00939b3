-- How many times in a row the instance was leased without the lease being
-- released (by an ack or an abandon): a claim adds one, a release sets it
-- to 0. More than one means the turns before died with their process (out
-- of memory, killed) or overran their lease; a dispatcher fails an
-- instance that keeps doing so (a poison instance) instead of running its
-- turn again.
ALTER TABLE instance_locks ADD COLUMN IF NOT EXISTS claims INT8 NOT NULL DEFAULT 0;
