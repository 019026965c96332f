-- The W3C `traceparent` of a call's `execute_tool` span, as on SQLite. NULL: no trace.
ALTER TABLE calls ADD COLUMN trace text;
