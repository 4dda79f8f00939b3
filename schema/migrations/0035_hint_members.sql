-- The processes that take hints from the others (package notify, --hints
-- members): where each serves its hints, which kinds it waits for, and
-- until when it counts as alive. Each process writes its own row every few
-- seconds and deletes it when it stops; a process that died leaves a row
-- that the others ignore once it expires and delete later. Times are the
-- processes' clocks: a skew between two makes a dead member's time with
-- the other longer or shorter by as much.
CREATE TABLE IF NOT EXISTS hint_members (
    member_id   TEXT        NOT NULL PRIMARY KEY,
    address     TEXT        NOT NULL,
    kinds       INT8        NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
