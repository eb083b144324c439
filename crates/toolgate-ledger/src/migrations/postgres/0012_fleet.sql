-- The fleet: see the SQLite migration of the same number.
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    started_ms BIGINT NOT NULL,
    seen_ms BIGINT NOT NULL
);

CREATE TABLE sessions (
    id_sha256 TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    caller TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX sessions_subject ON sessions (tenant, subject);
CREATE INDEX sessions_expiry ON sessions (expires_ms);

CREATE TABLE notices (
    id TEXT PRIMARY KEY,
    approval_id TEXT NOT NULL,
    webhook TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_ms BIGINT NOT NULL,
    claimed_until_ms BIGINT NOT NULL DEFAULT 0,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    last_status INTEGER,
    last_error TEXT
);
CREATE INDEX notices_due ON notices (state, next_ms);
CREATE INDEX notices_approval ON notices (approval_id);

-- A decision wakes the calls held on it on every replica at once: each
-- listens on this channel (polling is the fallback). Fired by whatever
-- decided it — a replica, the CLI, an expiry marked.
CREATE FUNCTION approvals_decided() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'pending' AND NEW.state <> 'pending' THEN
        PERFORM pg_notify('toolgate_approvals', NEW.id);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER approvals_decided AFTER UPDATE OF state ON approvals
FOR EACH ROW EXECUTE FUNCTION approvals_decided();
