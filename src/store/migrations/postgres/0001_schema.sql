-- The PostgreSQL schema: the same calls and suspensions as on SQLite, plus the replicas that
-- share the database. Timestamps of calls are Unix milliseconds (the process's clock, as on
-- SQLite); leases are timestamptz by the database's own clock, never a process's. JSON is stored
-- as text exactly as it was received or produced, but for a call's history, which is jsonb so
-- that an event is appended in place.

CREATE TABLE calls (
    -- insertion order: lists are served newest first and paged by this number
    seq             bigint GENERATED ALWAYS AS IDENTITY,
    call_id         text PRIMARY KEY,
    tool            text NOT NULL,
    -- read | idempotent | write: what a sweep does with the call if its replica dies
    effect          text NOT NULL,
    -- running | suspended | completed | failed | rejected | interrupted |
    -- needs_reconciliation | expired
    status          text NOT NULL,
    -- the API key name that made the call (NULL when auth is off)
    caller          text,
    input           text NOT NULL,
    output          text,
    -- {"code": ..., "message": ..., "details"?: ...}
    error           text,
    idempotency_key text,
    -- while running: the attempt the current run started at (a late outcome of an older run
    -- is refused by it); once finished: the attempts made in all
    attempts        integer NOT NULL,
    created_at      bigint NOT NULL,
    updated_at      bigint NOT NULL,
    -- the replica that runs (or last ran) the call
    owner           text,
    -- the call's append-only history, a JSON array of {"at", "kind", "actor"?, "details"?};
    -- NULL for a call inserted already completed, whose two events (created, completed) are
    -- derived from its columns when read
    events          jsonb
);

CREATE UNIQUE INDEX calls_by_seq ON calls (seq);
-- One call per (tool, idempotency key): the database, not a process, enforces exactly-once,
-- so it holds across replicas.
CREATE UNIQUE INDEX calls_by_idempotency_key ON calls (tool, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- The sweep looks for running calls whose owner is gone; only running calls are indexed.
CREATE INDEX calls_running ON calls (owner) WHERE status = 'running';
CREATE INDEX calls_by_tool ON calls (tool, seq);

CREATE TABLE suspensions (
    -- insertion order: the pending list is served oldest first and paged by this number
    seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token         text NOT NULL UNIQUE,
    call_id       text NOT NULL REFERENCES calls (call_id),
    tool          text NOT NULL,
    reason        text NOT NULL,
    input_schema  text NOT NULL,
    -- pending | approved | rejected | completed | expired
    status        text NOT NULL,
    resume_input  text,
    reject_reason text,
    created_at    bigint NOT NULL,
    resolved_at   bigint,
    expires_at    bigint,
    resolved_by   text
);

-- The approvals queue: only pending rows, so its size does not grow with history.
CREATE INDEX suspensions_pending ON suspensions (seq) WHERE status = 'pending';
CREATE INDEX suspensions_by_call ON suspensions (call_id);

-- The replicas serving this database, each holding a lease it renews every heartbeat. A running
-- call whose owner has no live lease is swept by any other replica.
CREATE TABLE replicas (
    replica_id       text PRIMARY KEY,
    started_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_expires_at timestamptz NOT NULL
);
