-- Agent runs: what the lethal-trifecta guard and the run budget know of a
-- run across calls, restarts and (on PostgreSQL) replicas. A run lives
-- `[runs] ttl_ms` from its first call; a call under its id after that
-- starts it anew: `started_ms` moves on, and legs from before it no longer
-- count (and are swept).
CREATE TABLE runs (
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    run TEXT NOT NULL,
    calls BIGINT NOT NULL CHECK (calls >= 0),
    started_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, subject, run)
);
CREATE INDEX runs_expiry ON runs (expires_ms);

-- The calls that brought a leg of the trifecta into a run (the first few
-- of each leg): which tool, which exact call, when its answer came back.
CREATE TABLE run_legs (
    seq BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    run TEXT NOT NULL,
    leg TEXT NOT NULL CHECK (leg IN ('private_data', 'untrusted_content')),
    tool TEXT NOT NULL,
    proposal_sha256 TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE INDEX run_legs_run ON run_legs (tenant, subject, run, at_ms);
CREATE INDEX run_legs_age ON run_legs (at_ms);
