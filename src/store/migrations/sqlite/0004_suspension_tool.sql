-- A suspension names its call's tool, so a page of the approvals queue reads the suspensions
-- alone: with a million calls stored, looking each pending call up in `calls` for its tool
-- was most of what made the queue slower than on a small store.
ALTER TABLE suspensions ADD COLUMN tool TEXT NOT NULL DEFAULT '';
UPDATE suspensions SET tool = (SELECT c.tool FROM calls c WHERE c.call_id = suspensions.call_id);
