-- PostgreSQL only (applied when SELECT version() does not report
-- CockroachDB, which has no heap pages to fill).

-- Turns and prunes update an instance's counters, which no index holds: a
-- heap-only update, with no new entry in any of the instances indexes,
-- when the new version fits on the row's page. Leave room for it (the
-- default packs pages full, so a table loaded in bulk would move every
-- row it updates first, and index it anew). Applies to pages written from
-- now on.
ALTER TABLE instances SET (fillfactor = 85);
