-- When an instance next needs a turn, on its lease row: the earliest
-- visible_at of its queued messages (the largest INT8 when it has none);
-- while a dispatcher holds the lease, the lease's end, so that an
-- abandoned lease comes back by itself. A claim reads the due instances
-- from the index below in order, and never passes over leased ones: before
-- this, it read the queue's oldest messages, the head of which belongs to
-- leased instances under load, and looked up a lease for each.
--
-- Who keeps it: a claim sets it to the lease's end; a release (ack or
-- abandon) to its instance's earliest message left. Every enqueue lowers
-- it to its message's visible_at; while the row has a lease it also
-- lowers it below locked_until, which tells the release that a message
-- came in that its own read may not have seen, so that it keeps the lower
-- value (see pkg/store/crdb/runtime.go).
ALTER TABLE instance_locks ADD COLUMN IF NOT EXISTS due_at INT8 NOT NULL DEFAULT 0;

UPDATE instance_locks l SET due_at = COALESCE(
    (SELECT min(q.visible_at) FROM orchestrator_queue q
     WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id),
    9223372036854775807);

UPDATE instance_locks SET due_at = LEAST(due_at, locked_until - 1) WHERE locked_until > 0;

-- Only instances with something to do: the many that wait for nothing
-- (finished, or idle without a message) stay out of it.
CREATE INDEX IF NOT EXISTS instance_locks_due ON instance_locks (tenant_id, due_at)
    WHERE due_at < 9223372036854775807;
