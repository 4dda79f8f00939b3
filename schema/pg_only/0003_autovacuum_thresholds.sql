-- PostgreSQL only (CockroachDB has no autovacuum; it refreshes its
-- statistics on its own).

-- A vacuum or an analyze that changes a table's page or row count
-- invalidates every cached plan that names the table, in every backend,
-- and the turns' statements name most of these tables: each backend then
-- plans them anew at its next call. The default thresholds (50 rows, then
-- a fraction of the table) vacuum and analyze a table of a few thousand
-- rows at every autovacuum round while it fills, which replans the hot
-- statements about once a second for nothing: at that size neither dead
-- rows nor statistics change a plan of these primary-key lookups. A fixed
-- 10,000 rows keeps them quiet until then; past about 50,000 rows the
-- fraction dominates and the defaults hold as before. instance_counts
-- keeps the defaults: a few rows, each rewritten by every start and end
-- faster than page pruning reclaims their old versions under concurrent
-- transactions, so that without a vacuum every round it grows.
ALTER TABLE instances SET (autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_threshold = 10000, autovacuum_analyze_threshold = 10000);
ALTER TABLE executions SET (autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_threshold = 10000, autovacuum_analyze_threshold = 10000);
ALTER TABLE history SET (autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_threshold = 10000, autovacuum_analyze_threshold = 10000);
