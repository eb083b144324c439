-- Retention: see the SQLite migration of the same number.
CREATE OR REPLACE FUNCTION operations_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.state IN ('reserved', 'dispatched', 'unknown') THEN
            RAISE EXCEPTION 'an operation in flight or of unknown outcome is never deleted';
        END IF;
        RETURN OLD;
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

CREATE OR REPLACE FUNCTION checkpoints_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.size > greatest((SELECT coalesce(max(log_index) + 1, 0) FROM receipts), (SELECT coalesce(max(before), 0) FROM archives)) THEN
            RAISE EXCEPTION 'a checkpoint cannot cover receipts the log does not hold';
        END IF;
        RETURN NEW;
    END IF;
    IF TG_OP = 'DELETE' AND OLD.size < (SELECT coalesce(max(before), 0) FROM archives) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'checkpoints are never rewritten, nor deleted unless an archive covers them';
END $$;

CREATE INDEX operations_created ON operations (created_ms, seq);
