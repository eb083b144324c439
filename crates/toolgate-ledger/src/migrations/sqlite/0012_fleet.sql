-- The fleet (issue "Many replicas, one gateway"): what replicas sharing one
-- ledger must agree on beyond approvals and operations.

-- Each live replica, seen at its last heartbeat: a caller's rate is shared
-- out among the replicas seen within the lease.
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    started_ms INTEGER NOT NULL,
    seen_ms INTEGER NOT NULL
);

-- Console sessions, by the SHA-256 of their id (the cookie's value is never
-- stored): any replica serves any approver, and sign-out ends them all.
CREATE TABLE sessions (
    id_sha256 TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    caller TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE INDEX sessions_subject ON sessions (tenant, subject);
CREATE INDEX sessions_expiry ON sessions (expires_ms);

-- The notification outbox: a notice is written in the transaction that
-- opens its approval, and delivered at least once by whichever replica
-- claims it, under its own id (the receiver's key to deduplicate).
CREATE TABLE notices (
    id TEXT PRIMARY KEY,
    approval_id TEXT NOT NULL,
    webhook TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_ms INTEGER NOT NULL,
    claimed_until_ms INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    last_status INTEGER,
    last_error TEXT
);
CREATE INDEX notices_due ON notices (state, next_ms);
CREATE INDEX notices_approval ON notices (approval_id);
