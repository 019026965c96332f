-- Inbox sessions of people signed in with an identity provider (`[inbox.oidc]`), as on SQLite:
-- the name to show for them, and the tools whose approvals they may decide (their grants'
-- `decides`, a JSON array of globs; NULL: every tool). A key's session leaves both NULL.
ALTER TABLE inbox_sessions ADD COLUMN display_name text;
ALTER TABLE inbox_sessions ADD COLUMN decides text;
