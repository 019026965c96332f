-- Sessions of the approval inbox (`/inbox`), as on SQLite: one row per signed-in person, found
-- by the SHA-256 of the session id (the id itself lives only in the person's cookie), shared by
-- every replica so that a person signed in on one is signed in on all, and across restarts.
CREATE TABLE inbox_sessions (
    -- hex SHA-256 of the session id
    id_sha256       text PRIMARY KEY,
    -- the API key the person signed in with; NULL when auth is off
    key_name        text,
    -- that key's role at sign-in: approver | admin
    role            text NOT NULL,
    -- hex SHA-256 of a domain-separated string with the key's token hash; NULL when auth is off
    key_fingerprint text,
    created_at      bigint NOT NULL,
    -- Unix ms, by the processes' clocks as for calls; from then on refused, and pruned
    expires_at      bigint NOT NULL
);
-- Pruning takes the expired ones.
CREATE INDEX inbox_sessions_expiry ON inbox_sessions (expires_at);
