-- Receipts stored compactly (issue "Evidence at line rate"). The leaf stays
-- the JCS bytes of the logged receipt; the row keeps `body`, from which those
-- bytes come back exactly: the compact form (`toolgate_core::receipt::compact`,
-- first byte 0x01) for receipts written from now on, the JCS text itself
-- (first byte `{`) for those written before. The kid is inside the body,
-- `created_ms` is the receipt's own `issued_at`, and the leaf hash is the
-- hash of the bytes that come back (the checkpointer computes it, off the
-- answer's path), so none of them has a column.
-- The table is rebuilt (SQLite cannot drop a NOT NULL column in place); its
-- guards are recreated as they were.
DROP TRIGGER checkpoints_within_log;
CREATE TABLE receipts_compact (
    log_index   INTEGER PRIMARY KEY CHECK (log_index >= 0),
    body        BLOB NOT NULL,
    salt        BLOB NOT NULL CHECK (length(salt) = 32),
    proposal    TEXT
);
INSERT INTO receipts_compact (log_index, body, salt, proposal)
    SELECT log_index, CAST(signed AS BLOB), salt, proposal FROM receipts ORDER BY log_index;
DROP TABLE receipts;
ALTER TABLE receipts_compact RENAME TO receipts;

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
CREATE TRIGGER checkpoints_within_log BEFORE INSERT ON checkpoints
WHEN NEW.size > (SELECT coalesce(max(log_index) + 1, 0) FROM receipts)
BEGIN
    SELECT RAISE(ABORT, 'a checkpoint cannot cover receipts the log does not hold');
END;
