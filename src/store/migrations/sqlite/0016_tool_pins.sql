-- Pinned definitions of upstream MCP servers' tools (`crate::upstream::pins`): for each tool,
-- the canonical JSON of the definition trusted and its SHA-256. A tool whose server lists
-- another definition is held until an admin accepts it (the pin is then replaced). Kept in the
-- store so that every replica holds the same tools.
CREATE TABLE tool_pins (
    upstream    TEXT NOT NULL,
    -- the tool's name on the upstream server
    tool        TEXT NOT NULL,
    -- hex SHA-256 of `definition`
    hash        TEXT NOT NULL,
    -- the canonical JSON (sorted keys) of name, title, description, schemas, annotations
    definition  TEXT NOT NULL,
    -- Unix ms
    pinned_at   INTEGER NOT NULL,
    -- the admin who accepted it; NULL when a connection pinned it (or auth is off)
    pinned_by   TEXT,
    -- 1: an admin accepted it (a change, or a new tool); 0: a connection pinned it
    accepted    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (upstream, tool)
) STRICT, WITHOUT ROWID;

-- The upstreams connected at least once: the first connection of an upstream (by any process)
-- inserts its row, and pins the tools it lists; inserting it again does nothing.
CREATE TABLE pinned_upstreams (
    upstream    TEXT PRIMARY KEY,
    -- Unix ms
    first_at    INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- Each definition an admin was told of (an `upstream.tool_changed` feed entry): a change is told
-- once, by whichever replica reads it first; an admin's accept forgets the tool's.
CREATE TABLE tool_changes (
    upstream    TEXT NOT NULL,
    tool        TEXT NOT NULL,
    -- hex SHA-256 of the definition listed
    hash        TEXT NOT NULL,
    -- Unix ms
    told_at     INTEGER NOT NULL,
    PRIMARY KEY (upstream, tool, hash)
) STRICT, WITHOUT ROWID;

-- Feed entries of an upstream's tool (`upstream.tool_changed`, `upstream.change_accepted`) name
-- the upstream and carry the change as JSON; they are of no call, and their `call_id` is empty
-- (SQLite cannot drop the column's NOT NULL without rebuilding the table, and with it the
-- sequence its cursors count on). `upstream` is NULL on a call's entry.
ALTER TABLE feed ADD COLUMN upstream TEXT;
ALTER TABLE feed ADD COLUMN detail TEXT;
