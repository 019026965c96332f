-- The approvals of a suspension whose policy needs several distinct approvers (`approvals = N`),
-- recorded until the quorum is reached: a JSON array of {"approver", "display_name"?, "at"},
-- oldest first; NULL: none yet.
ALTER TABLE suspensions ADD COLUMN approvals TEXT;
