-- Quota buckets shared by every replica (`crate::dispatch::quota`): one row per bucket, its
-- theoretical arrival time in microseconds on the database's clock, paid by one statement per
-- call. Unlogged: a bucket is no record, and losing them all in a crash only refills them, while
-- a logged row would make every paid call wait for a WAL flush.
CREATE UNLOGGED TABLE quota_buckets (
    -- the API key's name; empty for the anonymous principal (auth off)
    principal text NOT NULL,
    -- the tool whose own quota it is; empty for the principal's quota across tools
    scope     text NOT NULL,
    tat       bigint NOT NULL,
    PRIMARY KEY (principal, scope)
);
