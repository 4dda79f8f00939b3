-- What each committed batch of a delete, prune or erasure removed, for the
-- audit record it works under: written in the batch's own transaction, so
-- a record's counts (its result plus its tallies) are exact whatever the
-- moment a process dies. One row per transaction, inserted and never
-- updated: two batches of one record run at once, and adding into one row
-- from both would have serializable isolation roll one of them back.
-- FinishAudit folds a record's tallies into its result and deletes them, so
-- the table holds only the tallies of work not finished yet.
-- root_instance_id names the root a DeleteInstance transaction deleted
-- part of (NULL for a batch of many roots or a prune): a graceful delete
-- retried after a crash tells by it a root it deleted from one that was
-- gone before.
CREATE TABLE IF NOT EXISTS audit_tallies (
    tenant_id         TEXT  NOT NULL,
    record_id         TEXT  NOT NULL,
    tally_id          UUID  NOT NULL DEFAULT gen_random_uuid(),
    root_instance_id  TEXT,
    instances         INT8  NOT NULL DEFAULT 0,
    executions        INT8  NOT NULL DEFAULT 0,
    events            INT8  NOT NULL DEFAULT 0,
    rows              INT8  NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, record_id, tally_id)
);
