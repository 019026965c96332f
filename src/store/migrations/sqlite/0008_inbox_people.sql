-- Inbox sessions of people signed in with an identity provider (`[inbox.oidc]`): the name to
-- show for them, and the tools whose approvals they may decide (their grants' `decides`, as a
-- JSON array of globs; NULL: every tool). A key's session leaves both NULL: its rights are read
-- from the key on every request.
ALTER TABLE inbox_sessions ADD COLUMN display_name TEXT;
ALTER TABLE inbox_sessions ADD COLUMN decides TEXT;
