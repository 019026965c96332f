-- The change feed: one entry per change of a call's status other than into `running`, appended
-- in the same transaction as the change, in commit order (one writer). Readers page through it by
-- `seq`; the event stream, long-polls and webhooks are built on it.
CREATE TABLE feed (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    -- when the change happened (Unix ms)
    at       INTEGER NOT NULL,
    -- call.suspended | call.completed | call.failed | call.rejected | call.expired |
    -- call.interrupted | call.needs_reconciliation
    type     TEXT NOT NULL,
    call_id  TEXT NOT NULL,
    -- the call's attempts after the change
    attempts INTEGER NOT NULL,
    -- the suspension a `call.suspended` entry is about
    token    TEXT
) STRICT;
CREATE INDEX feed_by_at ON feed (at);

-- Entries up to `floor` (a seq) have been pruned: a cursor before it has missed some.
CREATE TABLE feed_state (floor INTEGER NOT NULL) STRICT;
INSERT INTO feed_state (floor) VALUES (0);
