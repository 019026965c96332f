-- A call inserted already completed (every read record: its `events` are derived, NULL) is one
-- entry of the audit chain, not two: `created`, with the status, attempts and output it was
-- recorded with (`store/audit/chain.rs`, as SQLite's writer chains it). Its creation and its
-- outcome are one write, so one entry records both.
--
-- And a `created` change captured from an `events` array carries no status: only a call
-- recorded already completed has one on its `created` entry.
CREATE OR REPLACE FUNCTION audit_call() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    seen integer := 0;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.events IS NULL OR NEW.events IS NULL THEN
            RETURN NULL;
        END IF;
        seen := jsonb_array_length(OLD.events);
    ELSIF NEW.events IS NULL THEN
        INSERT INTO audit_pending (at, call_id, kind, actor, tool, status, attempts, effect,
                                   input, output)
        VALUES (NEW.created_at, NEW.call_id, 'created', NEW.caller, NEW.tool, NEW.status,
                NEW.attempts, NEW.effect, NEW.input, NEW.output);
        RETURN NULL;
    END IF;
    INSERT INTO audit_pending (at, call_id, kind, actor, actor_name, details, tool, status,
                               attempts, effect, input, output, error)
    SELECT (e.value ->> 'at')::bigint, NEW.call_id, e.value ->> 'kind', e.value ->> 'actor',
           e.value ->> 'actor_name', (e.value -> 'details')::text, NEW.tool,
           CASE e.value ->> 'kind' WHEN 'created' THEN NULL ELSE NEW.status END,
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
