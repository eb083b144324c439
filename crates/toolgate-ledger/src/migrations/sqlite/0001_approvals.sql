-- Approvals: one row per approval asked for one exact call.
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
    created_ms       INTEGER NOT NULL,
    expires_ms       INTEGER NOT NULL,
    decided_by       TEXT,
    decision_reason  TEXT,
    decided_ms       INTEGER,
    used_ms          INTEGER
);
CREATE INDEX approvals_binding ON approvals (tenant, caller, server, tool, proposal_sha256, policy_version, created_ms);
CREATE INDEX approvals_state ON approvals (state, created_ms);

-- The store itself enforces the life of an approval, not only the code:
-- pending → approved | denied | expired; approved → consumed | expired.
-- Denied, expired and consumed are final.
CREATE TRIGGER approvals_transition BEFORE UPDATE OF state ON approvals
WHEN NOT (
    (OLD.state = 'pending' AND NEW.state IN ('approved', 'denied', 'expired'))
    OR (OLD.state = 'approved' AND NEW.state IN ('consumed', 'expired'))
)
BEGIN
    SELECT RAISE(ABORT, 'illegal approval transition');
END;

-- The binding and the content an approver saw never change.
CREATE TRIGGER approvals_immutable BEFORE UPDATE OF id, tenant, caller, server, tool, proposal_sha256, policy_version, arguments, created_ms, expires_ms ON approvals
BEGIN
    SELECT RAISE(ABORT, 'an approval''s binding is immutable');
END;

CREATE TRIGGER approvals_no_delete BEFORE DELETE ON approvals
BEGIN
    SELECT RAISE(ABORT, 'approvals are never deleted');
END;
