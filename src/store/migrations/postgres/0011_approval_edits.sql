-- Approval with edits, as on SQLite. A suspension's edit that waits for the rest of its approvers
-- (`approvals = N`): a JSON object {"input", "by", "display_name"?, "at"}, the input as it now
-- stands and who changed it; NULL: none. A call run with an edited input keeps what it was
-- called with and who edited it: a JSON object {"by", "display_name"?, "at", "original_input",
-- "input"}; NULL: never edited.
ALTER TABLE suspensions ADD COLUMN edit text;
ALTER TABLE calls ADD COLUMN edited text;
