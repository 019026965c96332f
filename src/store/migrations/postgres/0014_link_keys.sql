-- The keys that sign decision links (`crate::notify::links`), as on SQLite: one per rotation
-- period, shared by every replica so that a link made on one verifies on all. `epoch` is unique:
-- two replicas making a period's key at once insert the same epoch, and the later insert does
-- nothing (`ON CONFLICT DO NOTHING`), so both sign with the one key stored. A key is deleted
-- once every link it signed has expired (`retire_at`).
CREATE TABLE link_keys (
    -- random, URL-safe; the `kid` of the links it signs
    id          text PRIMARY KEY,
    epoch       bigint NOT NULL UNIQUE,
    -- 32 random bytes: the HMAC key
    secret      bytea NOT NULL,
    created_at  bigint NOT NULL,
    -- Unix ms; from then on a newer key signs
    signs_until bigint NOT NULL,
    -- Unix ms; from then on no link it signed is valid: the key is refused, and pruned
    retire_at   bigint NOT NULL
);
