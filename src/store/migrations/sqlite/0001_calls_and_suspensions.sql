-- Calls and the suspensions that park them. Timestamps are Unix milliseconds; JSON is stored as
-- text exactly as it was received or produced.

CREATE TABLE calls (
    call_id         TEXT PRIMARY KEY NOT NULL,
    tool            TEXT NOT NULL,
    -- running | suspended | completed | failed | rejected
    status          TEXT NOT NULL,
    input           TEXT NOT NULL,
    output          TEXT,
    -- {"code": ..., "message": ..., "details"?: ...} when the call failed or was rejected
    error           TEXT,
    -- the idempotency key the tool declared for this input, if any
    idempotency_key TEXT,
    attempts        INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;

CREATE TABLE suspensions (
    -- insertion order: the pending list is served oldest first and paged by this number
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    token         TEXT NOT NULL UNIQUE,
    call_id       TEXT NOT NULL REFERENCES calls (call_id),
    reason        TEXT NOT NULL,
    input_schema  TEXT NOT NULL,
    -- pending | approved | rejected
    status        TEXT NOT NULL,
    resume_input  TEXT,
    reject_reason TEXT,
    created_at    INTEGER NOT NULL,
    resolved_at   INTEGER
) STRICT;

-- The approvals queue: only pending rows, so its size does not grow with history.
CREATE INDEX suspensions_pending ON suspensions (seq) WHERE status = 'pending';
-- A call's pending suspension, for the call record.
CREATE INDEX suspensions_by_call ON suspensions (call_id);
