-- PostgreSQL only, like 0003.

-- instances is analyzed at the default threshold again. Until its first
-- analyze a table has no statistics, and a generic plan then judges
-- "tenant_id = $1" to match half a percent of its rows: with several
-- indexes led by tenant_id, the turns' statements chose one on tenant_id
-- alone and filtered the instance ids, reading every instance of the
-- tenant at each ack (a few hundred pages per call at a thousand
-- instances). The replans an analyze causes cost less than that.
ALTER TABLE instances RESET (autovacuum_analyze_threshold);
