-- Standing approvals, as on SQLite: an approver's "this tool, for this caller, for the next N
-- seconds or K calls", shared by every replica. A call takes one of `calls_left` by one
-- conditional UPDATE (`calls_left > 0`, unexpired, unrevoked) in the transaction that records
-- it; a second replica waits for the first's row lock and re-checks, so no limit is exceeded.
CREATE TABLE standing_approvals (
    id              text PRIMARY KEY,
    tool            text NOT NULL,
    -- the principal name whose calls it releases
    caller          text NOT NULL,
    approver        text,
    approver_name   text,
    -- the call whose approval granted it
    call_id         text NOT NULL,
    calls           integer NOT NULL,
    calls_left      integer NOT NULL,
    -- Unix ms, by the processes' clocks as for calls
    created_at      bigint NOT NULL,
    expires_at      bigint NOT NULL,
    revoked_at      bigint,
    revoked_by      text
);
CREATE INDEX standing_approvals_use ON standing_approvals (tool, caller, expires_at);
