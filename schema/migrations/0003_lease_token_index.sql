-- FetchOrchestrationItem reads the leased instance, its history and its
-- messages in the same round trip as the claim, by the new lease's token.
CREATE INDEX IF NOT EXISTS instance_locks_token ON instance_locks (lock_token);
