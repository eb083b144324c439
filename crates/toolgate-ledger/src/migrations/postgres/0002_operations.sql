-- Operations: one row per keyed write (as in SQLite).
CREATE TABLE operations (
    id               TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    server           TEXT NOT NULL,
    tool             TEXT NOT NULL,
    op_key           TEXT NOT NULL,
    caller           TEXT NOT NULL,
    proposal_sha256  TEXT NOT NULL CHECK (length(proposal_sha256) = 64),
    approval_id      TEXT,
    arguments        TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('reserved', 'dispatched', 'completed', 'tool_error', 'unknown',
                                                    'reconciled_applied', 'reconciled_not_applied')),
    outcome          TEXT,
    attempts         BIGINT NOT NULL,
    created_ms       BIGINT NOT NULL,
    updated_ms       BIGINT NOT NULL,
    lease_until_ms   BIGINT NOT NULL,
    resolved_by      TEXT,
    resolution       TEXT,
    seq              BIGSERIAL,
    UNIQUE (tenant, server, tool, op_key)
);
CREATE INDEX operations_state ON operations (state, created_ms);

-- The state machine of toolgate_core::operation, enforced by the store for
-- every replica and every hand-run statement.
CREATE FUNCTION operations_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'operations are never deleted';
    END IF;
    IF (NEW.id, NEW.tenant, NEW.server, NEW.tool, NEW.op_key, NEW.proposal_sha256, NEW.arguments, NEW.created_ms)
       IS DISTINCT FROM (OLD.id, OLD.tenant, OLD.server, OLD.tool, OLD.op_key, OLD.proposal_sha256, OLD.arguments, OLD.created_ms) THEN
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
CREATE TRIGGER operations_guard BEFORE UPDATE OR DELETE ON operations FOR EACH ROW EXECUTE FUNCTION operations_guard();
