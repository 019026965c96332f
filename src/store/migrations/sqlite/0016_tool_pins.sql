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
