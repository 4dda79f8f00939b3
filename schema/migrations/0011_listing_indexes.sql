-- Listing by id prefix: the range [prefix, prefix end) of ids, with the
-- creation time beside each, read from the index alone (1/256 of a
-- 1M-instance tenant: 2 ms instead of 20 ms of heap reads), then sorted.
-- created_at never changes, so acks do not rewrite this index on
-- CockroachDB.
CREATE INDEX IF NOT EXISTS instances_id_created ON instances (tenant_id, instance_id) INCLUDE (created_at)
    WHERE NOT deleting;

-- Bulk prune reads its candidates in (status, id) order from here: only
-- instances with more than one stored execution can be pruned, and once
-- pruned down to one they leave this index, so a call does not wade
-- through what earlier calls did (at 1M instances, 63,000 entries after a
-- few calls: 190 ms), nor through the instances of other statuses.
CREATE INDEX IF NOT EXISTS instances_prunable ON instances (tenant_id, status, instance_id)
    WHERE execution_count > 1;
