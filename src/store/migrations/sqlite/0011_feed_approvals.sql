-- What a `call.approval_recorded` feed entry keeps of its approval, as it was recorded: a JSON
-- object {"approvals": [{"approver", "display_name"?, "at"}, ...], "approvals_required"}, the
-- approval it records last (the event stream and webhooks name the approver and the progress).
-- NULL for every other entry.
ALTER TABLE feed ADD COLUMN approvals TEXT;
