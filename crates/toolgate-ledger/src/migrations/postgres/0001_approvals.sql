-- Approvals: one row per approval asked for one exact call (as in SQLite).
CREATE TABLE approvals (
    id               TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    caller           TEXT NOT NULL,
    server           TEXT NOT NULL,
    tool             TEXT NOT NULL,
    proposal_sha256  TEXT NOT NULL CHECK (length(proposal_sha256) = 64),
    policy_version   TEXT NOT NULL,
    arguments        TEXT NOT NULL,
    reason           TEXT NOT NULL,
    rules            TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired', 'consumed')),
    created_ms       BIGINT NOT NULL,
    expires_ms       BIGINT NOT NULL,
    decided_by       TEXT,
    decision_reason  TEXT,
    decided_ms       BIGINT,
    used_ms          BIGINT,
    seq              BIGSERIAL
);
CREATE INDEX approvals_binding ON approvals (tenant, caller, server, tool, proposal_sha256, policy_version, created_ms);
CREATE INDEX approvals_state ON approvals (state, created_ms);

-- The store enforces the life of an approval: pending → approved | denied |
-- expired; approved → consumed | expired; the binding never changes; no
-- row is ever deleted.
CREATE FUNCTION approvals_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'approvals are never deleted';
    END IF;
    IF (NEW.id, NEW.tenant, NEW.caller, NEW.server, NEW.tool, NEW.proposal_sha256, NEW.policy_version, NEW.arguments, NEW.created_ms, NEW.expires_ms)
       IS DISTINCT FROM (OLD.id, OLD.tenant, OLD.caller, OLD.server, OLD.tool, OLD.proposal_sha256, OLD.policy_version, OLD.arguments, OLD.created_ms, OLD.expires_ms) THEN
        RAISE EXCEPTION 'an approval''s binding is immutable';
    END IF;
    IF NOT ((OLD.state = 'pending' AND NEW.state IN ('approved', 'denied', 'expired'))
            OR (OLD.state = 'approved' AND NEW.state IN ('consumed', 'expired'))) THEN
        RAISE EXCEPTION 'illegal approval transition';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER approvals_guard BEFORE UPDATE OR DELETE ON approvals FOR EACH ROW EXECUTE FUNCTION approvals_guard();
