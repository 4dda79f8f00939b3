-- CockroachDB only (applied when SELECT version() reports CockroachDB).

-- Queue indexes are written at the head (visible_at ~ now); hash sharding spreads
-- those writes over ranges instead of one hot range per tenant.
CREATE INDEX IF NOT EXISTS orchestrator_queue_visible_sharded
    ON orchestrator_queue (tenant_id, visible_at, instance_id) USING HASH;

DROP INDEX IF EXISTS orchestrator_queue@orchestrator_queue_visible;

-- worker_queue keeps its plain index: its fetch locks the row it claims
-- (FOR UPDATE SKIP LOCKED), and over a hash-sharded index a locking scan
-- may lock a candidate per shard.

-- Queue rows live for seconds; keep their MVCC garbage for minutes, not hours.
ALTER TABLE orchestrator_queue CONFIGURE ZONE USING gc.ttlseconds = 600;

ALTER TABLE worker_queue CONFIGURE ZONE USING gc.ttlseconds = 600;

ALTER TABLE instance_leases CONFIGURE ZONE USING gc.ttlseconds = 600;
