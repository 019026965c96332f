-- Standing approvals (`standing` on an approval): an approver's "this tool, for this caller, for
-- the next N seconds or K calls". A later call of `tool` by `caller` that its policy would
-- suspend takes one of `calls_left` instead, while the row holds (not revoked, not expired),
-- by one conditional UPDATE in the transaction that records the call.
CREATE TABLE standing_approvals (
    id              TEXT PRIMARY KEY,
    tool            TEXT NOT NULL,
    -- the principal name whose calls it releases (never NULL: auth off offers none)
    caller          TEXT NOT NULL,
    -- who granted it, and the name they are shown by (an identity provider's), if any
    approver        TEXT,
    approver_name   TEXT,
    -- the call whose approval granted it
    call_id         TEXT NOT NULL,
    calls           INTEGER NOT NULL,
    calls_left      INTEGER NOT NULL,
    -- Unix ms
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    revoked_at      INTEGER,
    revoked_by      TEXT
) STRICT, WITHOUT ROWID;
-- A call finds the holding approvals of its tool and caller.
CREATE INDEX standing_approvals_use ON standing_approvals (tool, caller, expires_at);
