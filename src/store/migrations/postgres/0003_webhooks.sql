-- The webhook outbox, as on SQLite: each feed entry a webhook wants becomes one delivery to it,
-- created in the same transaction that moves the outbox's cursor past the entry. Of replicas
-- racing to move the cursor, one does (a conditional UPDATE, or an INSERT ... ON CONFLICT for the
-- first move) and the others change nothing, so an entry becomes its deliveries exactly once.
-- Replicas claim due deliveries with FOR UPDATE SKIP LOCKED, each for a lease (`claimed_until`):
-- two never claim one delivery, and one whose claimant died is claimed again once its lease is
-- over. Times are Unix milliseconds, by the processes' clocks, as for calls.
CREATE TABLE webhook_deliveries (
    -- creation order: claims take the oldest due first, lists page newest first by it
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- the webhook, by its URL
    webhook         text NOT NULL,
    -- the `webhook-id` the receiver sees, the same on every attempt
    message_id      text NOT NULL,
    -- the feed entry type it carries: call.suspended | call.completed | ...
    type            text NOT NULL,
    call_id         text NOT NULL,
    -- the request body, exactly as it is signed and sent on every attempt
    body            text NOT NULL,
    -- pending | delivered | failed
    status          text NOT NULL,
    -- attempts made: counted when a delivery is claimed
    attempts        integer NOT NULL,
    -- the HTTP status of the last attempt, when the receiver answered (410: disabled)
    last_status     integer,
    last_error      text,
    -- while pending: when it is due; NULL once settled for good
    next_attempt_at bigint,
    -- while claimed: until when its claimant holds it; past it, a delivery whose claimant died
    -- is claimed again
    claimed_until   bigint,
    created_at      bigint NOT NULL,
    updated_at      bigint NOT NULL
);
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
    id         integer PRIMARY KEY CHECK (id = 1),
    -- a feed cursor
    cursor     text NOT NULL,
    updated_at bigint NOT NULL
);
