-- The receipt log (C7): see the SQLite migration of the same number. Appends
-- take pg_advisory_xact_lock(7461002), so replicas append one at a time and
-- log indexes stay contiguous.
CREATE TABLE receipts (
    log_index   BIGINT PRIMARY KEY CHECK (log_index >= 0),
    kid         TEXT NOT NULL,
    leaf_hash   BYTEA NOT NULL CHECK (length(leaf_hash) = 32),
    signed      TEXT NOT NULL,
    salt        BYTEA NOT NULL CHECK (length(salt) = 32),
    proposal    TEXT,
    created_ms  BIGINT NOT NULL
);

CREATE FUNCTION receipts_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.log_index <> (SELECT coalesce(max(log_index) + 1, 0) FROM receipts) THEN
            RAISE EXCEPTION 'a receipt must take the next log index';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'receipts are append-only: a receipt is never rewritten or deleted';
END $$;
CREATE TRIGGER receipts_guard BEFORE INSERT OR UPDATE OR DELETE ON receipts FOR EACH ROW EXECUTE FUNCTION receipts_guard();

CREATE TABLE checkpoints (
    size        BIGINT PRIMARY KEY CHECK (size > 0),
    root        BYTEA NOT NULL CHECK (length(root) = 32),
    note        TEXT NOT NULL,
    created_ms  BIGINT NOT NULL
);
CREATE FUNCTION checkpoints_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.size > (SELECT coalesce(max(log_index) + 1, 0) FROM receipts) THEN
            RAISE EXCEPTION 'a checkpoint cannot cover receipts the log does not hold';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'checkpoints are never rewritten or deleted';
END $$;
CREATE TRIGGER checkpoints_guard BEFORE INSERT OR UPDATE OR DELETE ON checkpoints FOR EACH ROW EXECUTE FUNCTION checkpoints_guard();

CREATE TABLE log_keys (
    kid         TEXT PRIMARY KEY,
    ed25519     TEXT NOT NULL,
    ml_dsa_65   TEXT,
    created_ms  BIGINT NOT NULL
);
CREATE FUNCTION log_keys_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a key in the history is never rewritten or deleted';
END $$;
CREATE TRIGGER log_keys_guard BEFORE UPDATE OR DELETE ON log_keys FOR EACH ROW EXECUTE FUNCTION log_keys_guard();

CREATE TABLE tool_definitions (
    sha256      TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    server      TEXT NOT NULL,
    tool        TEXT NOT NULL,
    definition  TEXT NOT NULL,
    first_ms    BIGINT NOT NULL
);
