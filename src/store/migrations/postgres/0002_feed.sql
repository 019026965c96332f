-- The change feed: one entry per change of a call's status other than into `running`, appended
-- in the same transaction as the change. Entries are ordered by (xid, seq): the id of the
-- transaction that wrote them, then their number in it. A sequence value is taken before
-- commit, so by `seq` alone entry 10 can be visible before entry 9 commits, and a reader that
-- moved past 10 would lose 9 for ever. Instead readers take only entries whose transaction is
-- older than every transaction still in flight (`xid < pg_snapshot_xmin(pg_current_snapshot())`):
-- those are final, no entry can appear before them any more, and (xid, seq) orders them.
CREATE TABLE feed (
    xid      xid8 NOT NULL DEFAULT pg_current_xact_id(),
    seq      bigint GENERATED ALWAYS AS IDENTITY,
    at       bigint NOT NULL,
    -- call.suspended | call.completed | call.failed | call.rejected | call.expired |
    -- call.interrupted | call.needs_reconciliation
    type     text NOT NULL,
    call_id  text NOT NULL,
    attempts integer NOT NULL,
    -- the suspension a `call.suspended` entry is about
    token    text,
    PRIMARY KEY (xid, seq)
);
CREATE INDEX feed_by_at ON feed (at);

-- Entries up to (floor_xid, floor_seq) have been pruned: a cursor before it has missed some.
CREATE TABLE feed_state (
    floor_xid xid8 NOT NULL,
    floor_seq bigint NOT NULL
);
INSERT INTO feed_state (floor_xid, floor_seq) VALUES ('0', 0);
