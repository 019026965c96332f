-- The audit chain (`crate::store::audit`): one append-only, hash-chained record of every call's
-- creation and changes, every standing approval granted or revoked, every upstream tool change
-- an admin accepted, and the checkpoints that sign the chain's head.
--
-- Triggers capture each change in the transaction that makes it, whatever statement makes it
-- (the writer's, recovery's at open): no writing path can forget its entry, and a crash never
-- leaves a record without its entry. A captured change is pending (`seq` NULL, `source` the
-- JSON the trigger wrote); the writer chains every pending row before it commits the batch
-- (`sqlite/audit.rs`): it numbers it, writes the entry's canonical JSON and its hash, and drops
-- the source, which may hold inputs and outputs that the chain keeps only as hashes.
CREATE TABLE audit (
    -- write order
    pos     INTEGER PRIMARY KEY,
    -- Unix ms of the change
    at      INTEGER NOT NULL,
    -- the call it is about (NULL for a standing approval, an upstream change, a checkpoint)
    call_id TEXT,
    -- pending: what the trigger captured; NULL once chained
    source  TEXT,
    -- chained: the entry's number (1, 2, ...), its canonical JSON (RFC 8785) and hex SHA-256
    seq     INTEGER,
    entry   TEXT,
    hash    TEXT,
    -- a checkpoint's: the number of the entry whose hash it signs
    covers  INTEGER
);
CREATE UNIQUE INDEX audit_by_seq ON audit (seq) WHERE seq IS NOT NULL;
CREATE INDEX audit_pending ON audit (pos) WHERE seq IS NULL;
CREATE INDEX audit_by_call ON audit (call_id) WHERE call_id IS NOT NULL;
CREATE INDEX audit_checkpoints ON audit (covers) WHERE covers IS NOT NULL;

-- A call's events: on insert, all of them (a call inserted already completed stores none and
-- derives `created` and `completed` from its columns, so both are captured from those); on an
-- update of its history, those appended. The input is captured with `created`, the output with
-- a completion: the chain keeps their hashes.
CREATE TRIGGER audit_call_inserted AFTER INSERT ON calls BEGIN
    INSERT INTO audit (at, call_id, source)
    SELECT json_extract(e.value, '$.at'), NEW.call_id, json_object(
        'event', json(e.value), 'tool', NEW.tool, 'effect', NEW.effect, 'caller', NEW.caller,
        'status', NEW.status, 'attempts', NEW.attempts,
        'input', CASE json_extract(e.value, '$.kind') WHEN 'created' THEN NEW.input END,
        'output', CASE WHEN json_extract(e.value, '$.kind') IN ('completed', 'completed_externally')
            THEN NEW.output END,
        'error', NEW.error)
    FROM json_each(CASE NEW.events WHEN '' THEN json_array(
            json_object('at', NEW.created_at, 'kind', 'created', 'actor', NEW.caller),
            json_object('at', NEW.updated_at, 'kind', 'completed'))
        ELSE NEW.events END) AS e;
END;

CREATE TRIGGER audit_call_changed AFTER UPDATE OF events ON calls
WHEN NEW.events IS NOT OLD.events BEGIN
    INSERT INTO audit (at, call_id, source)
    SELECT json_extract(e.value, '$.at'), NEW.call_id, json_object(
        'event', json(e.value), 'tool', NEW.tool, 'effect', NEW.effect, 'caller', NEW.caller,
        'status', NEW.status, 'attempts', NEW.attempts,
        'output', CASE WHEN json_extract(e.value, '$.kind') IN ('completed', 'completed_externally')
            THEN NEW.output END,
        'error', NEW.error)
    FROM json_each(NEW.events) AS e
    WHERE e.key >= json_array_length(CASE OLD.events WHEN '' THEN '[]' ELSE OLD.events END);
END;

CREATE TRIGGER audit_standing_granted AFTER INSERT ON standing_approvals BEGIN
    INSERT INTO audit (at, source) VALUES (NEW.created_at, json_object(
        'kind', 'standing.granted', 'id', NEW.id, 'tool', NEW.tool, 'caller', NEW.caller,
        'by', NEW.approver, 'by_name', NEW.approver_name, 'call_id', NEW.call_id,
        'calls', NEW.calls, 'expires_at', NEW.expires_at));
END;

CREATE TRIGGER audit_standing_revoked AFTER UPDATE OF revoked_at ON standing_approvals
WHEN OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL BEGIN
    INSERT INTO audit (at, source) VALUES (NEW.revoked_at, json_object(
        'kind', 'standing.revoked', 'id', NEW.id, 'tool', NEW.tool, 'caller', NEW.caller,
        'by', NEW.revoked_by));
END;

CREATE TRIGGER audit_change_accepted AFTER INSERT ON feed
WHEN NEW.type = 'upstream.change_accepted' BEGIN
    INSERT INTO audit (at, source) VALUES (NEW.at, json_object(
        'kind', 'upstream.change_accepted', 'upstream', NEW.upstream,
        'change', json(NEW.detail)));
END;
