-- CountInstances by status without a filter reads maintained counters, not
-- the instances: a tenant's count of each status is the sum of a few shards,
-- and every write that creates an instance, changes its status, hides it
-- (an interrupted delete) or deletes it adds its delta to one shard picked
-- at random, in the same statement. Shards keep concurrent writers of one
-- tenant from queueing behind a single row.
CREATE TABLE IF NOT EXISTS instance_counts (
    tenant_id  TEXT NOT NULL,
    status     TEXT NOT NULL,
    shard      INT8 NOT NULL,
    n          INT8 NOT NULL,
    PRIMARY KEY (tenant_id, status, shard)
);

-- The instances that exist when the counters appear, in shard 0. Exact when
-- it runs before the code that maintains the counters serves writes (the
-- migration step of a deploy); otherwise recount (crdb.Store.RecountInstances).
INSERT INTO instance_counts (tenant_id, status, shard, n)
SELECT tenant_id, status, 0, count(*) FROM instances WHERE NOT deleting GROUP BY tenant_id, status
ON CONFLICT (tenant_id, status, shard) DO NOTHING;
