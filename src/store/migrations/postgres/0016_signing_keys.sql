-- The keys that sign attestations (`crate::signing`), as on SQLite: one per rotation period,
-- shared by every replica so that all sign with one key and publish one key set. `epoch` is
-- unique: two replicas making a period's key at once insert the same epoch, and the later insert
-- does nothing (`ON CONFLICT DO NOTHING`). A key is published until every token it signed has
-- expired (`retire_at`), then deleted.
CREATE TABLE signing_keys (
    -- random, URL-safe; the `kid` of the tokens it signs
    id          text PRIMARY KEY,
    epoch       bigint NOT NULL UNIQUE,
    -- the JWS algorithm: EdDSA
    alg         text NOT NULL,
    -- the private key, PKCS#8 DER
    private_der bytea NOT NULL,
    -- the public key as the JWK names it (Ed25519: 32 bytes)
    public      bytea NOT NULL,
    created_at  bigint NOT NULL,
    -- Unix ms; from then on a newer key signs
    signs_until bigint NOT NULL,
    -- Unix ms; from then on no token it signed is valid: the key is no longer published, and pruned
    retire_at   bigint NOT NULL
);
