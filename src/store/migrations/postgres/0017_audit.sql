-- The audit chain (`crate::store::audit`), the same entries as on SQLite: here triggers capture
-- every change of a call (its events), every standing approval revoked, and every upstream tool
-- change an admin accepted, in the transaction that makes it (whatever statement makes it: the
-- writer's batches, the lease sweep's), as a row of `audit_pending`.
--
-- Pending rows are ordered as the feed's entries are, by (xid, pos): every transaction that
-- writes them holds the feed writers' lock (`postgres/feed.rs`), so rows below the feed's
-- horizon are final and no row can later appear before them. One chainer at a time, across
-- replicas (`postgres/audit.rs`, under an advisory lock), chains the final pending rows in that
-- order into `audit` and drops them: one chain per deployment.
CREATE TABLE audit (
    seq     bigint PRIMARY KEY,
    at      bigint NOT NULL,
    call_id text,
    entry   text NOT NULL,
    hash    text NOT NULL,
    covers  bigint
);
CREATE INDEX audit_by_call ON audit (call_id) WHERE call_id IS NOT NULL;
CREATE INDEX audit_checkpoints ON audit (covers) WHERE covers IS NOT NULL;

CREATE TABLE audit_pending (
    xid        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    pos        bigint GENERATED ALWAYS AS IDENTITY,
    at         bigint NOT NULL,
    call_id    text,
    kind       text,
    actor      text,
    actor_name text,
    details    text,
    tool       text,
    status     text,
    attempts   integer,
    effect     text,
    input      text,
    output     text,
    error      text,
    source     text,
    PRIMARY KEY (xid, pos)
);

-- A call's events: on insert, all of them (a call inserted already completed stores NULL and
-- derives `created` and `completed` from its columns); on an update of its history, those
-- appended.
CREATE FUNCTION audit_call() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    seen integer := 0;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.events IS NULL OR NEW.events IS NULL THEN
            RETURN NULL;
        END IF;
        seen := jsonb_array_length(OLD.events);
    ELSIF NEW.events IS NULL THEN
        INSERT INTO audit_pending (at, call_id, kind, actor, tool, effect, input)
        VALUES (NEW.created_at, NEW.call_id, 'created', NEW.caller, NEW.tool, NEW.effect,
                NEW.input);
        INSERT INTO audit_pending (at, call_id, kind, tool, status, attempts, output)
        VALUES (NEW.updated_at, NEW.call_id, 'completed', NEW.tool, NEW.status, NEW.attempts,
                NEW.output);
        RETURN NULL;
    END IF;
    INSERT INTO audit_pending (at, call_id, kind, actor, actor_name, details, tool, status,
                               attempts, effect, input, output, error)
    SELECT (e.value ->> 'at')::bigint, NEW.call_id, e.value ->> 'kind', e.value ->> 'actor',
           e.value ->> 'actor_name', (e.value -> 'details')::text, NEW.tool, NEW.status,
           NEW.attempts, NEW.effect,
           CASE e.value ->> 'kind' WHEN 'created' THEN NEW.input END,
           CASE WHEN e.value ->> 'kind' IN ('completed', 'completed_externally')
                THEN NEW.output END,
           NEW.error
    FROM jsonb_array_elements(NEW.events) WITH ORDINALITY AS e(value, n)
    WHERE e.n > seen
    ORDER BY e.n;
    RETURN NULL;
END $$;
CREATE TRIGGER audit_call AFTER INSERT OR UPDATE OF events ON calls
    FOR EACH ROW EXECUTE FUNCTION audit_call();

-- A standing approval revoked (its grant is an event of the call that granted it).
CREATE FUNCTION audit_standing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL THEN
        INSERT INTO audit_pending (at, source) VALUES (NEW.revoked_at, jsonb_build_object(
            'kind', 'standing.revoked', 'id', NEW.id, 'tool', NEW.tool, 'caller', NEW.caller,
            'by', NEW.revoked_by)::text);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER audit_standing AFTER UPDATE OF revoked_at ON standing_approvals
    FOR EACH ROW EXECUTE FUNCTION audit_standing();

CREATE FUNCTION audit_change_accepted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_pending (at, source) VALUES (NEW.at, jsonb_build_object(
        'kind', 'upstream.change_accepted', 'upstream', NEW.upstream,
        'change', NEW.detail::jsonb)::text);
    RETURN NULL;
END $$;
CREATE TRIGGER audit_change_accepted AFTER INSERT ON feed
    FOR EACH ROW WHEN (NEW.type = 'upstream.change_accepted')
    EXECUTE FUNCTION audit_change_accepted();

-- Each export of the chain (`[audit.export]`), as on SQLite: the last entry it delivered, and
-- the replica that sends it now (a claim with a deadline, so that one replica at a time does).
CREATE TABLE audit_exports (
    sink          text PRIMARY KEY,
    after_seq     bigint NOT NULL,
    delivered     bigint NOT NULL,
    failures      bigint NOT NULL,
    last_error    text,
    last_at       bigint,
    claimed_by    text,
    claimed_until bigint
);
