-- The trace of the call or turn that queued a row, as W3C traceparent text,
-- so that the turn or activity the row causes continues that trace. NULL:
-- queued outside any trace. Bounded: version 00 is 55 characters.
ALTER TABLE orchestrator_queue ADD COLUMN IF NOT EXISTS trace_context VARCHAR(64);
ALTER TABLE worker_queue ADD COLUMN IF NOT EXISTS trace_context VARCHAR(64);
