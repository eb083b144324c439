-- Upstream identity: see the SQLite migration of the same number.
CREATE TABLE connections (
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    server TEXT NOT NULL,
    sealed BYTEA NOT NULL,
    expires_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, subject, server)
);

CREATE TABLE refresh_leases (
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    server TEXT NOT NULL,
    holder TEXT NOT NULL,
    until_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, subject, server)
);

CREATE TABLE oauth_states (
    id_sha256 TEXT PRIMARY KEY,
    sealed BYTEA NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX oauth_states_expiry ON oauth_states (expires_ms);
