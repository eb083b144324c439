-- An operation key belongs to the person who sent it (as an idempotency key
-- belongs to one account): operations are unique on (tenant, subject,
-- server, tool, key). SQLite cannot change a table's UNIQUE constraint, so
-- the table is rebuilt with its triggers. Rows from before are the
-- sender's by its caller name (a caller's subject unless configured).
CREATE TABLE operations_v5 (
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
    subject          TEXT NOT NULL,
    UNIQUE (tenant, subject, server, tool, op_key)
);
INSERT INTO operations_v5 (id, tenant, server, tool, op_key, caller, proposal_sha256, approval_id, arguments, state, outcome,
                           attempts, created_ms, updated_ms, lease_until_ms, resolved_by, resolution, subject)
    SELECT id, tenant, server, tool, op_key, caller, proposal_sha256, approval_id, arguments, state, outcome,
           attempts, created_ms, updated_ms, lease_until_ms, resolved_by, resolution, caller
    FROM operations ORDER BY rowid;
DROP TABLE operations;
ALTER TABLE operations_v5 RENAME TO operations;
CREATE INDEX operations_state ON operations (state, created_ms);

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

CREATE TRIGGER operations_immutable BEFORE UPDATE OF id, tenant, subject, server, tool, op_key, proposal_sha256, arguments, created_ms ON operations
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
