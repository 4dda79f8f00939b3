-- Orchard's tables. Every primary key starts with tenant_id; every time is INT8
-- milliseconds since the Unix epoch, taken from the Go clock. One statement per
-- step, each idempotent: CockroachDB commits DDL outside any transaction.

CREATE TABLE IF NOT EXISTS tenants (
    tenant_id   TEXT  NOT NULL,
    state       TEXT  NOT NULL DEFAULT 'active',
    limits      JSONB NOT NULL DEFAULT '{}',
    retention   JSONB NOT NULL DEFAULT '{}',
    created_at  INT8  NOT NULL,
    updated_at  INT8  NOT NULL,
    PRIMARY KEY (tenant_id)
);

CREATE TABLE IF NOT EXISTS definitions (
    tenant_id   TEXT  NOT NULL,
    name        TEXT  NOT NULL,
    version     TEXT  NOT NULL,
    body        JSONB NOT NULL,
    created_at  INT8  NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);

CREATE TABLE IF NOT EXISTS instances (
    tenant_id             TEXT  NOT NULL,
    instance_id           TEXT  NOT NULL,
    name                  TEXT  NOT NULL,
    version               TEXT  NOT NULL,
    current_execution_id  INT8  NOT NULL,
    status                TEXT  NOT NULL,
    completed_at          INT8,
    parent_instance_id    TEXT,
    root_instance_id      TEXT  NOT NULL,
    created_at            INT8  NOT NULL,
    updated_at            INT8  NOT NULL,
    input                 BYTEA,
    tags                  JSONB NOT NULL DEFAULT '{}',
    retention             JSONB,
    execution_count       INT8  NOT NULL DEFAULT 1,
    event_count           INT8  NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, instance_id)
);

CREATE TABLE IF NOT EXISTS executions (
    tenant_id     TEXT NOT NULL,
    instance_id   TEXT NOT NULL,
    execution_id  INT8 NOT NULL,
    status        TEXT NOT NULL,
    input         BYTEA,
    output        BYTEA,
    error         TEXT,
    started_at    INT8 NOT NULL,
    completed_at  INT8,
    event_count   INT8 NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, instance_id, execution_id)
);

CREATE TABLE IF NOT EXISTS history (
    tenant_id     TEXT  NOT NULL,
    instance_id   TEXT  NOT NULL,
    execution_id  INT8  NOT NULL,
    event_id      INT8  NOT NULL,
    kind          TEXT  NOT NULL,
    payload       BYTEA,
    created_at    INT8  NOT NULL,
    PRIMARY KEY (tenant_id, instance_id, execution_id, event_id)
);

-- Messages for an instance: start, activity results, timers (visible_at in the
-- future), external events, child results, cancel. A message is consumed by the
-- ack of the turn that fetched it, by id.
CREATE TABLE IF NOT EXISTS orchestrator_queue (
    tenant_id     TEXT NOT NULL,
    instance_id   TEXT NOT NULL,
    id            UUID NOT NULL DEFAULT gen_random_uuid(),
    execution_id  INT8 NOT NULL DEFAULT 0,
    kind          TEXT NOT NULL,
    payload       BYTEA,
    visible_at    INT8 NOT NULL,
    created_at    INT8 NOT NULL,
    PRIMARY KEY (tenant_id, instance_id, id)
);

-- The lease a dispatcher holds on an instance. Claimed and checked by
-- compare-and-set on lock_token and locked_until; deleted when released.
CREATE TABLE IF NOT EXISTS instance_locks (
    tenant_id     TEXT NOT NULL,
    instance_id   TEXT NOT NULL,
    lock_token    UUID NOT NULL,
    locked_until  INT8 NOT NULL,
    PRIMARY KEY (tenant_id, instance_id)
);

-- Activity tasks. A leased task has visible_at = locked_until, so a lapsed
-- lease makes it visible again without a second predicate.
CREATE TABLE IF NOT EXISTS worker_queue (
    tenant_id     TEXT NOT NULL,
    id            UUID NOT NULL DEFAULT gen_random_uuid(),
    instance_id   TEXT NOT NULL,
    execution_id  INT8 NOT NULL,
    activity_id   INT8 NOT NULL,
    name          TEXT NOT NULL,
    task_queue    TEXT NOT NULL,
    input         BYTEA,
    attempt       INT8 NOT NULL DEFAULT 1,
    visible_at    INT8 NOT NULL,
    lock_token    UUID,
    locked_until  INT8,
    created_at    INT8 NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

CREATE TABLE IF NOT EXISTS janitor_runs (
    tenant_id      TEXT  NOT NULL,
    run_id         UUID  NOT NULL DEFAULT gen_random_uuid(),
    started_at     INT8  NOT NULL,
    finished_at    INT8,
    result         JSONB NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant_id, run_id)
);
