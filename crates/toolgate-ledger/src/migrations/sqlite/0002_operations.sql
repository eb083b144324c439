-- Operations: one row per keyed write, unique on (tenant, server, tool, key).
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
    attempts         INTEGER NOT NULL,
    created_ms       INTEGER NOT NULL,
    updated_ms       INTEGER NOT NULL,
    lease_until_ms   INTEGER NOT NULL,
    resolved_by      TEXT,
    resolution       TEXT,
    UNIQUE (tenant, server, tool, op_key)
);
CREATE INDEX operations_state ON operations (state, created_ms);

-- The store enforces the state machine (toolgate_core::operation), not only
-- the code: a write after a crash, a second replica or a hand-run UPDATE
-- cannot move an operation along an edge that is not drawn.
CREATE TRIGGER operations_transition BEFORE UPDATE OF state ON operations
WHEN NOT (
    (OLD.state = 'reserved' AND NEW.state IN ('reserved', 'dispatched'))
    OR (OLD.state = 'dispatched' AND NEW.state IN ('completed', 'tool_error', 'unknown', 'reconciled_not_applied'))
    OR (OLD.state = 'unknown' AND NEW.state IN ('reconciled_applied', 'reconciled_not_applied'))
    OR (OLD.state = 'reconciled_not_applied' AND NEW.state = 'reserved')
)
BEGIN
    SELECT RAISE(ABORT, 'illegal operation transition');
END;

-- What the operation is, and a recorded outcome, never change.
CREATE TRIGGER operations_immutable BEFORE UPDATE OF id, tenant, server, tool, op_key, proposal_sha256, arguments, created_ms ON operations
BEGIN
    SELECT RAISE(ABORT, 'an operation''s key and payload are immutable');
END;

CREATE TRIGGER operations_outcome_kept BEFORE UPDATE OF outcome ON operations
WHEN OLD.outcome IS NOT NULL AND NEW.outcome IS NOT OLD.outcome
BEGIN
    SELECT RAISE(ABORT, 'a recorded outcome is never rewritten');
END;

CREATE TRIGGER operations_no_delete BEFORE DELETE ON operations
BEGIN
    SELECT RAISE(ABORT, 'operations are never deleted');
END;
