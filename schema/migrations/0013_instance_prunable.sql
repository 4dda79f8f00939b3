-- Instances with more than one stored execution, the only ones a prune can
-- shorten, with their status: bulk prune reads its candidates here, by
-- status. It replaces the partial index instances_prunable (WHERE
-- execution_count > 1), whose predicate made every prune rewrite each
-- pruned instance in all of the instances indexes (on PostgreSQL a change
-- to a column an index depends on forbids a heap-only update): 60% of a
-- bulk prune's time at 5 events per pruned execution. Now a prune changes
-- only the instance's counters, which no index holds, and deletes the row
-- here when one execution is left; a continue-as-new adds it, and a turn
-- that changes the status of an instance listed here changes it here too.
CREATE TABLE IF NOT EXISTS instance_prunable (
    tenant_id    TEXT NOT NULL,
    instance_id  TEXT NOT NULL,
    status       TEXT NOT NULL,
    PRIMARY KEY (tenant_id, instance_id)
);

CREATE INDEX IF NOT EXISTS instance_prunable_status ON instance_prunable (tenant_id, status, instance_id);

INSERT INTO instance_prunable (tenant_id, instance_id, status)
SELECT tenant_id, instance_id, status FROM instances WHERE execution_count > 1
ON CONFLICT (tenant_id, instance_id) DO NOTHING;

DROP INDEX IF EXISTS instances_prunable;
