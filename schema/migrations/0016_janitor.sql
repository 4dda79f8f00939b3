-- The janitor: retention candidates, the deletion audit log and the
-- operations it runs for the API (graceful deletes).

-- Retention reads, status by status, the terminal roots that completed
-- before a cutoff, oldest first, with what it needs to judge each one
-- (its name's rule) from the index alone. Children go with their root, so
-- only roots are here; instances with a retention of their own are judged
-- one by one from the second index (few: set at start, per instance).
CREATE INDEX IF NOT EXISTS instances_expiry ON instances (tenant_id, status, completed_at, instance_id) INCLUDE (name)
    WHERE completed_at IS NOT NULL AND parent_instance_id IS NULL AND retention IS NULL;

CREATE INDEX IF NOT EXISTS instances_expiry_override ON instances (tenant_id, completed_at, instance_id) INCLUDE (status, name, retention)
    WHERE completed_at IS NOT NULL AND parent_instance_id IS NULL AND retention IS NOT NULL;

-- Every delete and prune, by whom, of what, and how it ended. A record is
-- written before the work it describes and finished after it, so one
-- without finished_at is a run that did not finish. record_id is chosen by
-- the writer: a random id for an API call, the job's id for the janitor,
-- so a job that is retried after a crash finishes its own record.
CREATE TABLE IF NOT EXISTS audit_records (
    tenant_id    TEXT  NOT NULL,
    record_id    TEXT  NOT NULL,
    actor        TEXT  NOT NULL,
    role         TEXT  NOT NULL,
    action       TEXT  NOT NULL,
    request      JSONB NOT NULL DEFAULT '{}',
    result       JSONB NOT NULL DEFAULT '{}',
    started_at   INT8  NOT NULL,
    finished_at  INT8,
    error        TEXT,
    PRIMARY KEY (tenant_id, record_id)
);

-- A tenant's log, newest first, and the pruning of old records.
CREATE INDEX IF NOT EXISTS audit_records_tenant_started ON audit_records (tenant_id, started_at, record_id);

-- The platform's log across tenants, newest first.
CREATE INDEX IF NOT EXISTS audit_records_started ON audit_records (started_at, tenant_id, record_id);

-- Work the API hands to the janitor and callers poll: a graceful delete
-- (cancel, wait until terminal, delete). The janitor claims pending ones.
CREATE TABLE IF NOT EXISTS operations (
    tenant_id     TEXT  NOT NULL,
    operation_id  TEXT  NOT NULL,
    kind          TEXT  NOT NULL,
    request       JSONB NOT NULL,
    state         TEXT  NOT NULL,
    result        JSONB NOT NULL DEFAULT '{}',
    error         TEXT,
    created_at    INT8  NOT NULL,
    updated_at    INT8  NOT NULL,
    deadline      INT8  NOT NULL,
    PRIMARY KEY (tenant_id, operation_id)
);

CREATE INDEX IF NOT EXISTS operations_open ON operations (state, created_at) WHERE state IN ('pending', 'running');
