-- The audit chain (`crate::store::audit`): one append-only, hash-chained record of every call's
-- creation and changes, every standing approval granted or revoked, every upstream tool change
-- an admin accepted, and the checkpoints that sign the chain's head.
--
-- Triggers capture each change in the transaction that makes it, whatever statement makes it
-- (the writer's, recovery's at open): no writing path can forget its entry, and a crash never
-- leaves a record without its entry. A captured change waits in `audit_pending`; the writer
-- chains every pending row before it commits the batch (`sqlite/audit.rs`): it numbers it,
-- writes the entry's canonical JSON and hash into `audit`, and drops the pending row, which may
-- hold an input or an output that the chain keeps only as a hash.
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

-- Changes captured, not yet chained: a call's event (`kind` and its columns), or any other
-- change as JSON (`source`: a standing approval, an upstream change, a checkpoint).
CREATE TABLE audit_pending (
    pos        INTEGER PRIMARY KEY,
    at         INTEGER NOT NULL,
    call_id    TEXT,
    kind       TEXT,
    actor      TEXT,
    actor_name TEXT,
    details    TEXT,
    tool       TEXT,
    status     TEXT,
    attempts   INTEGER,
    effect     TEXT,
    input      TEXT,
    output     TEXT,
    error      TEXT,
    source     TEXT
);

-- A call inserted already completed (every read answered at once) stores no events and derives
-- `created` and `completed` from its columns: both are captured from those.
CREATE TRIGGER audit_call_recorded AFTER INSERT ON calls WHEN NEW.events = '' BEGIN
    INSERT INTO audit_pending (at, call_id, kind, actor, tool, effect, input)
    VALUES (NEW.created_at, NEW.call_id, 'created', NEW.caller, NEW.tool, NEW.effect, NEW.input);
    INSERT INTO audit_pending (at, call_id, kind, tool, status, attempts, output)
    VALUES (NEW.updated_at, NEW.call_id, 'completed', NEW.tool, NEW.status, NEW.attempts,
            NEW.output);
END;

-- Any other call's events: all of them on insert, those appended on an update of its history.
-- The input is captured with `created`, the output with a completion.
CREATE TRIGGER audit_call_inserted AFTER INSERT ON calls WHEN NEW.events != '' BEGIN
    INSERT INTO audit_pending (at, call_id, kind, actor, actor_name, details, tool, status,
                               attempts, effect, input, output, error)
    SELECT e.value ->> '$.at', NEW.call_id, e.value ->> '$.kind', e.value ->> '$.actor',
           e.value ->> '$.actor_name', e.value -> '$.details', NEW.tool, NEW.status,
           NEW.attempts, NEW.effect,
           CASE e.value ->> '$.kind' WHEN 'created' THEN NEW.input END,
           CASE WHEN e.value ->> '$.kind' IN ('completed', 'completed_externally')
                THEN NEW.output END,
           NEW.error
    FROM json_each(NEW.events) AS e;
END;

CREATE TRIGGER audit_call_changed AFTER UPDATE OF events ON calls
WHEN NEW.events IS NOT OLD.events AND OLD.events != '' BEGIN
    INSERT INTO audit_pending (at, call_id, kind, actor, actor_name, details, tool, status,
                               attempts, effect, output, error)
    SELECT e.value ->> '$.at', NEW.call_id, e.value ->> '$.kind', e.value ->> '$.actor',
           e.value ->> '$.actor_name', e.value -> '$.details', NEW.tool, NEW.status,
           NEW.attempts, NEW.effect,
           CASE WHEN e.value ->> '$.kind' IN ('completed', 'completed_externally')
                THEN NEW.output END,
           NEW.error
    FROM json_each(NEW.events) AS e
    WHERE e.key >= json_array_length(OLD.events);
END;

CREATE TRIGGER audit_standing_granted AFTER INSERT ON standing_approvals BEGIN
    INSERT INTO audit_pending (at, source) VALUES (NEW.created_at, json_object(
        'kind', 'standing.granted', 'id', NEW.id, 'tool', NEW.tool, 'caller', NEW.caller,
        'by', NEW.approver, 'by_name', NEW.approver_name, 'call_id', NEW.call_id,
        'calls', NEW.calls, 'expires_at', NEW.expires_at));
END;

CREATE TRIGGER audit_standing_revoked AFTER UPDATE OF revoked_at ON standing_approvals
WHEN OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL BEGIN
    INSERT INTO audit_pending (at, source) VALUES (NEW.revoked_at, json_object(
        'kind', 'standing.revoked', 'id', NEW.id, 'tool', NEW.tool, 'caller', NEW.caller,
        'by', NEW.revoked_by));
END;

CREATE TRIGGER audit_change_accepted AFTER INSERT ON feed
WHEN NEW.type = 'upstream.change_accepted' BEGIN
    INSERT INTO audit_pending (at, source) VALUES (NEW.at, json_object(
        'kind', 'upstream.change_accepted', 'upstream', NEW.upstream,
        'change', json(NEW.detail)));
END;
