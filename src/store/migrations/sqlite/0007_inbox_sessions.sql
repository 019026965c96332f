-- Sessions of the approval inbox (`/inbox`): one row per signed-in person. The session id itself
-- lives only in the person's cookie; a row is found by the id's SHA-256, so a copy of this table
-- lets no one act as anyone. A session is checked against the configured keys on every request
-- (by `key_fingerprint`), so removing or changing a key ends its sessions at once.
CREATE TABLE inbox_sessions (
    -- hex SHA-256 of the session id
    id_sha256       TEXT PRIMARY KEY,
    -- the API key the person signed in with; NULL when auth is off
    key_name        TEXT,
    -- that key's role at sign-in: approver | admin
    role            TEXT NOT NULL,
    -- hex SHA-256 of a domain-separated string with the key's token hash; NULL when auth is off
    key_fingerprint TEXT,
    created_at      INTEGER NOT NULL,
    -- Unix ms; from then on the session is refused, and pruned
    expires_at      INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
-- Pruning takes the expired ones.
CREATE INDEX inbox_sessions_expiry ON inbox_sessions (expires_at);
