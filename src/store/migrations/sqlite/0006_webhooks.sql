-- The webhook outbox: each feed entry a webhook wants becomes one delivery to it, created in the
-- same transaction that moves the outbox's cursor past the entry, so an entry becomes its
-- deliveries exactly once (whoever moves the cursor) and a crash between reading the feed and
-- recording them loses none. Deliveries are then claimed, attempted and settled one by one.
CREATE TABLE webhook_deliveries (
    -- creation order: claims take the oldest due first, lists page newest first by it
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    -- the webhook, by its URL
    webhook         TEXT NOT NULL,
    -- the `webhook-id` the receiver sees, the same on every attempt
    message_id      TEXT NOT NULL,
    -- the feed entry type it carries: call.suspended | call.completed | ...
    type            TEXT NOT NULL,
    call_id         TEXT NOT NULL,
    -- the request body, exactly as it is signed and sent on every attempt
    body            TEXT NOT NULL,
    -- pending | delivered | failed
    status          TEXT NOT NULL,
    -- attempts made: counted when a delivery is claimed
    attempts        INTEGER NOT NULL,
    -- the HTTP status of the last attempt, when the receiver answered (410: disabled)
    last_status     INTEGER,
    last_error      TEXT,
    -- while pending: when it is due (Unix ms); NULL once settled for good
    next_attempt_at INTEGER,
    -- while claimed: until when (Unix ms) its claimant holds it; past it, a delivery whose
    -- claimant died is claimed again
    claimed_until   INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
-- What is due: only pending deliveries are indexed, so the index does not grow with history.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
-- Lists by status, newest first.
CREATE INDEX webhook_deliveries_by_status ON webhook_deliveries (status, id);
-- Disabled webhooks: only deliveries whose receiver answered 410 Gone.
CREATE INDEX webhook_deliveries_gone ON webhook_deliveries (webhook) WHERE last_status = 410;

-- Where the outbox has read the feed up to: no row before the outbox's first start, then one,
-- moved by compare-and-set.
CREATE TABLE webhook_outbox (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    -- a feed cursor
    cursor     TEXT NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
