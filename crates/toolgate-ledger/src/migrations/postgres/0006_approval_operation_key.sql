-- The client's own operation key the call was sent with (NULL: none, and
-- the gateway names the operation after the approval). An approval is for
-- one operation: a call under another key, or under none, is another
-- operation and never waits on, uses or replays this one.
ALTER TABLE approvals ADD COLUMN operation_key TEXT;

CREATE OR REPLACE FUNCTION approvals_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'approvals are never deleted';
    END IF;
    IF (NEW.id, NEW.tenant, NEW.caller, NEW.subject, NEW.operation_key, NEW.server, NEW.tool, NEW.proposal_sha256, NEW.policy_version, NEW.arguments, NEW.created_ms, NEW.expires_ms)
       IS DISTINCT FROM (OLD.id, OLD.tenant, OLD.caller, OLD.subject, OLD.operation_key, OLD.server, OLD.tool, OLD.proposal_sha256, OLD.policy_version, OLD.arguments, OLD.created_ms, OLD.expires_ms) THEN
        RAISE EXCEPTION 'an approval''s binding is immutable';
    END IF;
    IF NOT ((OLD.state = 'pending' AND NEW.state IN ('approved', 'denied', 'expired'))
            OR (OLD.state = 'approved' AND NEW.state IN ('consumed', 'expired'))) THEN
        RAISE EXCEPTION 'illegal approval transition';
    END IF;
    RETURN NEW;
END $$;
