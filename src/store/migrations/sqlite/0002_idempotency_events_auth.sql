-- Exactly-once effects, crash recovery, who did what, and expiring suspensions.

-- What the call's tool does to the world, so a restart knows what to do with a call left running.
-- Rows from before this migration are treated as writes: the careful choice.
ALTER TABLE calls ADD COLUMN effect TEXT NOT NULL DEFAULT 'write';
-- The API key name that made the call (NULL when auth is off).
ALTER TABLE calls ADD COLUMN caller TEXT;

-- One call per (tool, idempotency key): the store, not memory, enforces exactly-once. Keys from
-- before this migration were not unique; keep each on its oldest call.
UPDATE calls SET idempotency_key = NULL
WHERE idempotency_key IS NOT NULL
  AND rowid NOT IN (
    SELECT min(rowid) FROM calls WHERE idempotency_key IS NOT NULL GROUP BY tool, idempotency_key
  );
CREATE UNIQUE INDEX calls_by_idempotency_key ON calls (tool, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Listing and recovery by status, listing by tool.
CREATE INDEX calls_by_status ON calls (status);
CREATE INDEX calls_by_tool ON calls (tool);

ALTER TABLE suspensions ADD COLUMN expires_at INTEGER;
ALTER TABLE suspensions ADD COLUMN resolved_by TEXT;

-- Each call's append-only history.
CREATE TABLE call_events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    call_id TEXT NOT NULL REFERENCES calls (call_id),
    at      INTEGER NOT NULL,
    -- created | suspended | approved | rejected | completed_externally | redispatched |
    -- completed | failed | interrupted | needs_reconciliation | reconciled | expired
    kind    TEXT NOT NULL,
    -- the API key name that caused it, when a person or client did
    actor   TEXT,
    details TEXT
) STRICT;
CREATE INDEX call_events_by_call ON call_events (call_id, seq);
