-- The running calls, in a table of their own instead of a partial index on `calls`.
--
-- `calls_running` indexed `calls (owner) WHERE status = 'running'`: with `status` in its
-- predicate, no update of a call's status could be HOT, so every outcome wrote a new version of
-- the call into all five indexes, and the indexes and the dead versions grew with every call.
-- Here a call is a row of `running_calls` while it runs (inserted in the statement that makes it
-- running, deleted in the one that ends the run), and an outcome's update of `calls` touches no
-- indexed column: it is HOT when its page has room, which the fillfactor leaves it.
--
-- Every statement that moves a call into or out of `running` writes both tables in one
-- statement, and locks the call's row in `calls` before the one in `running_calls` (the sweep
-- as well), so two of them never wait for each other in turn.
CREATE TABLE running_calls (
    call_id text PRIMARY KEY,
    -- the replica running the call (the same as calls.owner)
    owner   text NOT NULL
);

INSERT INTO running_calls (call_id, owner)
SELECT call_id, coalesce(owner, '') FROM calls WHERE status = 'running';

DROP INDEX calls_running;

-- A quarter of each new page is left for the updates of its calls (the outcome, the history).
ALTER TABLE calls SET (fillfactor = 75);

-- The table churns a row per call and stays small: vacuumed often, whatever its size.
ALTER TABLE running_calls SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);
