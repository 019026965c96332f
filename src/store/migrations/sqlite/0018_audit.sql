-- The audit chain (`crate::store::audit`): one append-only, hash-chained record of every call's
-- creation and changes, every standing approval granted or revoked, every upstream tool change
-- an admin accepted, and the checkpoints that sign the chain's head.
--
-- The writer appends each entry in the savepoint of the write that makes the change
-- (`sqlite/audit.rs`), so a record never commits without its entry, nor an entry without its
-- record.
CREATE TABLE audit (
    -- the entry's number: 1, 2, ...
    seq     INTEGER PRIMARY KEY,
    -- Unix ms of the change
    at      INTEGER NOT NULL,
    -- the call it is about (NULL for a standing approval, an upstream change, a checkpoint)
    call_id TEXT,
    -- the entry's canonical JSON (RFC 8785), and its hex SHA-256 linked to the one before
    entry   TEXT NOT NULL,
    hash    TEXT NOT NULL,
    -- a checkpoint's: the number of the entry whose hash it signs
    covers  INTEGER
) STRICT;
CREATE INDEX audit_by_call ON audit (call_id) WHERE call_id IS NOT NULL;
CREATE INDEX audit_checkpoints ON audit (covers) WHERE covers IS NOT NULL;

-- Each export of the chain (`[audit.export]`: `otlp`, `syslog`): the last entry it delivered,
-- so that a restart sends on from there (at least once, in order), and who sends it now (a
-- claim with a deadline, so that one process at a time does).
CREATE TABLE audit_exports (
    sink          TEXT PRIMARY KEY,
    after_seq     INTEGER NOT NULL,
    delivered     INTEGER NOT NULL,
    failures      INTEGER NOT NULL,
    last_error    TEXT,
    last_at       INTEGER,
    claimed_by    TEXT,
    claimed_until INTEGER
) STRICT;
