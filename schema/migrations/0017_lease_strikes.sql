-- How many turns of the instance, each run alone after its lease had
-- lapsed, did not end: a dispatcher adds one before it runs such a turn, a
-- release (ack, abandon) sets it to 0. A lease lapses when its dispatcher
-- dies, whatever killed it; only a turn that was running alone when its
-- process died can have killed it, so only those count towards failing a
-- poison instance (claims, which every lapsed lease raises, only marks the
-- instance to be run alone).
ALTER TABLE instance_locks ADD COLUMN IF NOT EXISTS strikes INT8 NOT NULL DEFAULT 0;
