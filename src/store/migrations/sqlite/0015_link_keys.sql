-- The keys that sign decision links (`crate::notify::links`): one per rotation period, found by
-- its id (the `kid` a link names). Kept in the store so that every replica signs and verifies
-- alike. `epoch` is the period the key signs in (Unix ms divided by the rotation period): two
-- processes that make a period's key at once insert the same epoch, and the second insert does
-- nothing, so both sign with the one key stored. A key is deleted once every link it signed has
-- expired (`retire_at`).
CREATE TABLE link_keys (
    -- random, URL-safe; the `kid` of the links it signs
    id          TEXT PRIMARY KEY,
    epoch       INTEGER NOT NULL UNIQUE,
    -- 32 random bytes: the HMAC key
    secret      BLOB NOT NULL,
    created_at  INTEGER NOT NULL,
    -- Unix ms; from then on a newer key signs
    signs_until INTEGER NOT NULL,
    -- Unix ms; from then on no link it signed is valid: the key is refused, and pruned
    retire_at   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
