-- Pinned definitions of upstream MCP servers' tools (`crate::upstream::pins`), as on SQLite:
-- for each tool, the canonical JSON of the definition trusted (kept as text, as it was hashed)
-- and its SHA-256, shared by every replica so that all hold the same changed tools.
CREATE TABLE tool_pins (
    upstream    text NOT NULL,
    -- the tool's name on the upstream server
    tool        text NOT NULL,
    -- hex SHA-256 of `definition`
    hash        text NOT NULL,
    -- the canonical JSON (sorted keys) of name, title, description, schemas, annotations
    definition  text NOT NULL,
    -- Unix ms
    pinned_at   bigint NOT NULL,
    -- the admin who accepted it; NULL when a connection pinned it (or auth is off)
    pinned_by   text,
    -- an admin accepted it (a change, or a new tool), rather than a connection pinning it
    accepted    boolean NOT NULL DEFAULT false,
    PRIMARY KEY (upstream, tool)
);

-- The upstreams connected at least once. Two replicas connecting at once insert the same row:
-- the later insert waits for the first's commit, then does nothing, and reads its pins back.
CREATE TABLE pinned_upstreams (
    upstream    text PRIMARY KEY,
    -- Unix ms
    first_at    bigint NOT NULL
);

-- Each definition an admin was told of (an `upstream.tool_changed` feed entry): a change is told
-- once, by whichever replica reads it first; an admin's accept forgets the tool's.
CREATE TABLE tool_changes (
    upstream    text NOT NULL,
    tool        text NOT NULL,
    -- hex SHA-256 of the definition listed
    hash        text NOT NULL,
    -- Unix ms
    told_at     bigint NOT NULL,
    PRIMARY KEY (upstream, tool, hash)
);

-- Feed entries of an upstream's tool (`upstream.tool_changed`, `upstream.change_accepted`) name
-- the upstream and carry the change as JSON; they are of no call, and their `call_id` is empty,
-- as on SQLite. `upstream` is NULL on a call's entry.
ALTER TABLE feed ADD COLUMN upstream text, ADD COLUMN detail text;
