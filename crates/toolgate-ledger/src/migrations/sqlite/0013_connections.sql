-- Upstream identity, mode "oauth" (issue "Upstream identity"): each
-- person's own grant at an upstream server, kept here so every replica
-- uses it. The tokens are sealed by the gateway (AES-256-GCM, bound to the
-- row's tenant, subject and server) before they reach the ledger.
CREATE TABLE connections (
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    server TEXT NOT NULL,
    sealed BLOB NOT NULL,
    expires_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, subject, server)
);

-- Who refreshes a grant now: one holder per grant across the fleet, so a
-- rotating refresh token is never spent twice. Its own table, so writing a
-- grant and holding its refresh never overwrite each other.
CREATE TABLE refresh_leases (
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    server TEXT NOT NULL,
    holder TEXT NOT NULL,
    until_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, subject, server)
);

-- Authorization requests under way, by the SHA-256 of their `state` (the
-- parameter itself is never stored): each is taken once, by whichever
-- replica the callback reaches.
CREATE TABLE oauth_states (
    id_sha256 TEXT PRIMARY KEY,
    sealed BLOB NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE INDEX oauth_states_expiry ON oauth_states (expires_ms);
