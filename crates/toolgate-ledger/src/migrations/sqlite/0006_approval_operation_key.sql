-- The client's own operation key the call was sent with (NULL: none, and
-- the gateway names the operation after the approval). An approval is for
-- one operation: a call under another key, or under none, is another
-- operation and never waits on, uses or replays this one.
ALTER TABLE approvals ADD COLUMN operation_key TEXT;

DROP TRIGGER approvals_immutable;
CREATE TRIGGER approvals_immutable BEFORE UPDATE OF id, tenant, caller, subject, operation_key, server, tool, proposal_sha256, policy_version, arguments, created_ms, expires_ms ON approvals
BEGIN
    SELECT RAISE(ABORT, 'an approval''s binding is immutable');
END;
