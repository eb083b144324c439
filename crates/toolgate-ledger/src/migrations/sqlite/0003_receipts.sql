-- The receipt log (C7). One row per leaf, log indexes contiguous from 0:
-- the row is both the receipt and the leaf, so neither can exist without
-- the other. `signed` is the JCS text of {"receipt", "sig"}; `leaf_hash`
-- is RFC 6962's hash of exactly those bytes. `salt` (behind the receipt's
-- salted hashes) and `proposal` (what was asked, for `toolgate replay`)
-- are private: they never leave the ledger in a bundle.
CREATE TABLE receipts (
    log_index   INTEGER PRIMARY KEY CHECK (log_index >= 0),
    kid         TEXT NOT NULL,
    leaf_hash   BLOB NOT NULL CHECK (length(leaf_hash) = 32),
    signed      TEXT NOT NULL,
    salt        BLOB NOT NULL CHECK (length(salt) = 32),
    proposal    TEXT,
    created_ms  INTEGER NOT NULL
);

CREATE TRIGGER receipts_contiguous BEFORE INSERT ON receipts
WHEN NEW.log_index != (SELECT coalesce(max(log_index) + 1, 0) FROM receipts)
BEGIN
    SELECT RAISE(ABORT, 'a receipt must take the next log index');
END;
CREATE TRIGGER receipts_immutable BEFORE UPDATE ON receipts
BEGIN
    SELECT RAISE(ABORT, 'receipts are append-only: a receipt is never rewritten');
END;
CREATE TRIGGER receipts_kept BEFORE DELETE ON receipts
BEGIN
    SELECT RAISE(ABORT, 'receipts are append-only: a receipt is never deleted');
END;

-- Signed checkpoints (C2SP signed notes) of the log at a size.
CREATE TABLE checkpoints (
    size        INTEGER PRIMARY KEY CHECK (size > 0),
    root        BLOB NOT NULL CHECK (length(root) = 32),
    note        TEXT NOT NULL,
    created_ms  INTEGER NOT NULL
);
CREATE TRIGGER checkpoints_within_log BEFORE INSERT ON checkpoints
WHEN NEW.size > (SELECT coalesce(max(log_index) + 1, 0) FROM receipts)
BEGIN
    SELECT RAISE(ABORT, 'a checkpoint cannot cover receipts the log does not hold');
END;
CREATE TRIGGER checkpoints_immutable BEFORE UPDATE ON checkpoints
BEGIN
    SELECT RAISE(ABORT, 'checkpoints are never rewritten');
END;
CREATE TRIGGER checkpoints_kept BEFORE DELETE ON checkpoints
BEGIN
    SELECT RAISE(ABORT, 'checkpoints are never deleted');
END;

-- Every key that ever signed here (the key history), as verifier keys.
CREATE TABLE log_keys (
    kid         TEXT PRIMARY KEY,
    ed25519     TEXT NOT NULL,
    ml_dsa_65   TEXT,
    created_ms  INTEGER NOT NULL
);
CREATE TRIGGER log_keys_immutable BEFORE UPDATE ON log_keys
BEGIN
    SELECT RAISE(ABORT, 'a key in the history is never rewritten');
END;
CREATE TRIGGER log_keys_kept BEFORE DELETE ON log_keys
BEGIN
    SELECT RAISE(ABORT, 'a key in the history is never deleted');
END;

-- Tool definitions receipts name by hash, for `toolgate export --pack`.
CREATE TABLE tool_definitions (
    sha256      TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    server      TEXT NOT NULL,
    tool        TEXT NOT NULL,
    definition  TEXT NOT NULL,
    first_ms    INTEGER NOT NULL
);
