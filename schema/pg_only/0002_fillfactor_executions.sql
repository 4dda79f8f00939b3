-- PostgreSQL only (see 0001_fillfactor).

-- An execution's row is rewritten by every turn (its counters, then its
-- outcome), which no secondary index holds: room on its page keeps each of
-- those a heap-only update.
ALTER TABLE executions SET (fillfactor = 90);
