-- An operation key belongs to the person who sent it (as an idempotency key
-- belongs to one account): operations are unique on (tenant, subject,
-- server, tool, key). Rows from before are the sender's by its caller name
-- (a caller's subject unless configured).
ALTER TABLE operations ADD COLUMN subject TEXT NOT NULL DEFAULT '';
ALTER TABLE operations DISABLE TRIGGER operations_guard;
UPDATE operations SET subject = caller;
ALTER TABLE operations ENABLE TRIGGER operations_guard;
ALTER TABLE operations ALTER COLUMN subject DROP DEFAULT;
ALTER TABLE operations DROP CONSTRAINT operations_tenant_server_tool_op_key_key;
ALTER TABLE operations ADD CONSTRAINT operations_key UNIQUE (tenant, subject, server, tool, op_key);

CREATE OR REPLACE FUNCTION operations_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'operations are never deleted';
    END IF;
    IF (NEW.id, NEW.tenant, NEW.subject, NEW.server, NEW.tool, NEW.op_key, NEW.proposal_sha256, NEW.arguments, NEW.created_ms)
       IS DISTINCT FROM (OLD.id, OLD.tenant, OLD.subject, OLD.server, OLD.tool, OLD.op_key, OLD.proposal_sha256, OLD.arguments, OLD.created_ms) THEN
        RAISE EXCEPTION 'an operation''s key and payload are immutable';
    END IF;
    IF OLD.outcome IS NOT NULL AND NEW.outcome IS DISTINCT FROM OLD.outcome THEN
        RAISE EXCEPTION 'a recorded outcome is never rewritten';
    END IF;
    IF NOT ((OLD.state = 'reserved' AND NEW.state IN ('reserved', 'dispatched'))
            OR (OLD.state = 'dispatched' AND NEW.state IN ('completed', 'tool_error', 'unknown', 'reconciled_not_applied'))
            OR (OLD.state = 'unknown' AND NEW.state IN ('reconciled_applied', 'reconciled_not_applied'))
            OR (OLD.state = 'reconciled_not_applied' AND NEW.state = 'reserved')) THEN
        RAISE EXCEPTION 'illegal operation transition';
    END IF;
    RETURN NEW;
END $$;
