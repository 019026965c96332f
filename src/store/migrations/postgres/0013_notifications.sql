-- Notifications (`[[notify]]` channels: email, Slack) travel through the webhooks' outbox, as on
-- SQLite: a delivery is a channel's when `channel` names it (NULL: a webhook's, whose URL
-- `webhook` holds; a channel's delivery leaves `webhook` empty).
-- the channel's `name`, as configured
ALTER TABLE webhook_deliveries ADD COLUMN channel text;
-- whom it reaches: an email address, a Slack user or channel id
ALTER TABLE webhook_deliveries ADD COLUMN recipient text;
-- what the channel answered once it was sent (Slack: the posted message's channel and ts, which
-- the call's decision updates), as JSON
ALTER TABLE webhook_deliveries ADD COLUMN receipt text;
-- A call's notifications, which its decision updates.
CREATE INDEX webhook_deliveries_notifications ON webhook_deliveries (call_id)
    WHERE channel IS NOT NULL;
