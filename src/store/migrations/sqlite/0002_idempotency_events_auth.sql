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
-- Recovery finds the calls left running; only those are indexed, so finished calls cost the
-- index nothing. Listing by tool has its own index.
CREATE INDEX calls_running ON calls (call_id) WHERE status = 'running';
CREATE INDEX calls_by_tool ON calls (tool);

ALTER TABLE suspensions ADD COLUMN expires_at INTEGER;
ALTER TABLE suspensions ADD COLUMN resolved_by TEXT;

-- Each call's append-only history: a JSON array of {"at", "kind", "actor"?, "details"?} on the
-- call's own row, appended to with json_insert. A separate table would cost two more B-tree
-- inserts per event, and the history is only ever read with its call.
--   kind: created | suspended | approved | rejected | completed_externally | redispatched |
--         completed | failed | interrupted | needs_reconciliation | reconciled | expired
ALTER TABLE calls ADD COLUMN events TEXT NOT NULL DEFAULT '[]';
