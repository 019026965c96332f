-- The W3C `traceparent` of a call's `execute_tool` span, when traces were exported as it was
-- made: the approval that releases it hours later links to it, and `GET /calls/{id}` shows its
-- `trace_id`. NULL: no trace.
ALTER TABLE calls ADD COLUMN trace text;
