-- The leases held, by token: what a fetch reads back after its claim, and
-- what a failed fetch or a zombie's consumption look up. Only rows with a
-- lease (leased_until > 0) are in it, so that the writes that leave a row
-- free (the start's insert, every release, every wake of a free instance)
-- add no entry here; a free row's token names nothing anyone looks for.
CREATE INDEX IF NOT EXISTS instance_leases_held ON instance_leases (lease_token) WHERE leased_until > 0;

DROP INDEX IF EXISTS instance_leases_token;
