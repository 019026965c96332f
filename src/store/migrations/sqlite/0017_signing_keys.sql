-- The keys that sign attestations (`crate::signing`): one per rotation period, found by its id
-- (the `kid` a token names), kept in the store so that every replica signs with the same key and
-- publishes the same key set. As for `link_keys`: `epoch` is the period the key signs in (Unix ms
-- divided by the rotation period), and two processes that make a period's key at once insert the
-- same epoch, the second insert doing nothing. A key is published until every token it signed has
-- expired (`retire_at`), then deleted.
CREATE TABLE signing_keys (
    -- random, URL-safe; the `kid` of the tokens it signs
    id          TEXT PRIMARY KEY,
    epoch       INTEGER NOT NULL UNIQUE,
    -- the JWS algorithm: EdDSA
    alg         TEXT NOT NULL,
    -- the private key, PKCS#8 DER
    private_der BLOB NOT NULL,
    -- the public key as the JWK names it (Ed25519: 32 bytes)
    public      BLOB NOT NULL,
    created_at  INTEGER NOT NULL,
    -- Unix ms; from then on a newer key signs
    signs_until INTEGER NOT NULL,
    -- Unix ms; from then on no token it signed is valid: the key is no longer published, and pruned
    retire_at   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
