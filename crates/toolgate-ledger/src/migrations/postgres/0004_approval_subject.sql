-- The person behind the caller who asked (its subject), so that nobody
-- decides their own call under another credential. Rows from before keep
-- '' (the caller's name is then what is compared).
ALTER TABLE approvals ADD COLUMN subject TEXT NOT NULL DEFAULT '';

-- Who asked is part of what an approval is: it never changes either.
CREATE OR REPLACE FUNCTION approvals_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'approvals are never deleted';
    END IF;
    IF (NEW.id, NEW.tenant, NEW.caller, NEW.subject, NEW.server, NEW.tool, NEW.proposal_sha256, NEW.policy_version, NEW.arguments, NEW.created_ms, NEW.expires_ms)
       IS DISTINCT FROM (OLD.id, OLD.tenant, OLD.caller, OLD.subject, OLD.server, OLD.tool, OLD.proposal_sha256, OLD.policy_version, OLD.arguments, OLD.created_ms, OLD.expires_ms) THEN
        RAISE EXCEPTION 'an approval''s binding is immutable';
    END IF;
    IF NOT ((OLD.state = 'pending' AND NEW.state IN ('approved', 'denied', 'expired'))
            OR (OLD.state = 'approved' AND NEW.state IN ('consumed', 'expired'))) THEN
        RAISE EXCEPTION 'illegal approval transition';
    END IF;
    RETURN NEW;
END $$;
