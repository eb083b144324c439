-- The person behind the caller who asked (its subject), so that nobody
-- decides their own call under another credential. Rows from before keep
-- '' (the caller's name is then what is compared).
ALTER TABLE approvals ADD COLUMN subject TEXT NOT NULL DEFAULT '';

-- Who asked is part of what an approval is: it never changes either.
DROP TRIGGER approvals_immutable;
CREATE TRIGGER approvals_immutable BEFORE UPDATE OF id, tenant, caller, subject, server, tool, proposal_sha256, policy_version, arguments, created_ms, expires_ms ON approvals
BEGIN
    SELECT RAISE(ABORT, 'an approval''s binding is immutable');
END;
