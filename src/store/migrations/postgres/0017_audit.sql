-- The audit chain (`crate::store::audit`), as on SQLite: triggers capture every change of a
-- call (its events), every standing approval granted or revoked, and every upstream tool change
-- an admin accepted, in the transaction that makes it, as a pending row.
--
-- Pending rows are ordered as the feed's entries are, by (xid, pos): every transaction that
-- writes them holds the feed writers' lock (`postgres/feed.rs`), so rows below the feed's
-- horizon are final and no row can later appear before them. One chainer at a time, across
-- replicas (`postgres/audit.rs`, under an advisory lock), numbers the final pending rows in
-- that order, writes each entry's canonical JSON and hash, and drops the source: one chain per
-- deployment.
CREATE TABLE audit (
    xid     xid8 NOT NULL DEFAULT pg_current_xact_id(),
    pos     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      bigint NOT NULL,
    call_id text,
    source  text,
    seq     bigint,
    entry   text,
    hash    text,
    covers  bigint
);
CREATE UNIQUE INDEX audit_by_seq ON audit (seq) WHERE seq IS NOT NULL;
CREATE INDEX audit_pending ON audit (xid, pos) WHERE seq IS NULL;
CREATE INDEX audit_by_call ON audit (call_id) WHERE call_id IS NOT NULL;
CREATE INDEX audit_checkpoints ON audit (covers) WHERE covers IS NOT NULL;

-- A call's events: on insert, all of them (a call inserted already completed stores NULL and
-- derives `created` and `completed` from its columns); on an update of its history, those
-- appended.
CREATE FUNCTION audit_call() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    events jsonb := NEW.events;
    seen   integer := 0;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.events IS NULL OR NEW.events IS NULL THEN
            RETURN NULL;
        END IF;
        seen := jsonb_array_length(OLD.events);
    ELSIF events IS NULL THEN
        events := jsonb_build_array(
            jsonb_strip_nulls(jsonb_build_object('at', NEW.created_at, 'kind', 'created',
                'actor', NEW.caller)),
            jsonb_build_object('at', NEW.updated_at, 'kind', 'completed'));
    END IF;
    INSERT INTO audit (at, call_id, source)
    SELECT (e.value ->> 'at')::bigint, NEW.call_id, jsonb_build_object(
        'event', e.value, 'tool', NEW.tool, 'effect', NEW.effect, 'caller', NEW.caller,
        'status', NEW.status, 'attempts', NEW.attempts,
        'input', CASE e.value ->> 'kind' WHEN 'created' THEN NEW.input END,
        'output', CASE WHEN e.value ->> 'kind' IN ('completed', 'completed_externally')
            THEN NEW.output END,
        'error', NEW.error)::text
    FROM jsonb_array_elements(events) WITH ORDINALITY AS e(value, n)
    WHERE e.n > seen
    ORDER BY e.n;
    RETURN NULL;
END $$;
CREATE TRIGGER audit_call AFTER INSERT OR UPDATE OF events ON calls
    FOR EACH ROW EXECUTE FUNCTION audit_call();

CREATE FUNCTION audit_standing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO audit (at, source) VALUES (NEW.created_at, jsonb_build_object(
            'kind', 'standing.granted', 'id', NEW.id, 'tool', NEW.tool, 'caller', NEW.caller,
            'by', NEW.approver, 'by_name', NEW.approver_name, 'call_id', NEW.call_id,
            'calls', NEW.calls, 'expires_at', NEW.expires_at)::text);
    ELSIF OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL THEN
        INSERT INTO audit (at, source) VALUES (NEW.revoked_at, jsonb_build_object(
            'kind', 'standing.revoked', 'id', NEW.id, 'tool', NEW.tool, 'caller', NEW.caller,
            'by', NEW.revoked_by)::text);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER audit_standing AFTER INSERT OR UPDATE OF revoked_at ON standing_approvals
    FOR EACH ROW EXECUTE FUNCTION audit_standing();

CREATE FUNCTION audit_change_accepted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit (at, source) VALUES (NEW.at, jsonb_build_object(
        'kind', 'upstream.change_accepted', 'upstream', NEW.upstream,
        'change', NEW.detail::jsonb)::text);
    RETURN NULL;
END $$;
CREATE TRIGGER audit_change_accepted AFTER INSERT ON feed
    FOR EACH ROW WHEN (NEW.type = 'upstream.change_accepted')
    EXECUTE FUNCTION audit_change_accepted();
