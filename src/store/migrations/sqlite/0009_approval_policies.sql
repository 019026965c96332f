-- Approval policies. The approvals of a suspension whose policy needs several distinct approvers
-- (`approvals = N`), recorded until the quorum is reached: a JSON array of {"approver",
-- "display_name"?, "at"}, oldest first; NULL: none yet. And when a suspension left undecided
-- past its policy's `escalate_after_s` was escalated (Unix ms; NULL: not escalated).
ALTER TABLE suspensions ADD COLUMN approvals TEXT;
ALTER TABLE suspensions ADD COLUMN escalated_at INTEGER;
