-- Archived ranges (`toolgate log archive`, issue "Evidence at line rate"):
-- the log's first `before` receipts live as C2SP tlog-tiles files in the
-- archive folder, verified there before their rows were removed. `root` is
-- the log's root at `before` (a checkpoint of that size is signed with it);
-- `frontier` its right edge (the perfect subtrees' roots, largest first,
-- 32 bytes each), from which the gateway carries on without reading the
-- archived leaves. Each archive extends the last, up to a checkpointed size,
-- by whole tiles of 256.
CREATE TABLE archives (
    before      INTEGER PRIMARY KEY CHECK (before > 0 AND before % 256 = 0),
    root        BLOB NOT NULL CHECK (length(root) = 32),
    frontier    BLOB NOT NULL CHECK (length(frontier) % 32 = 0),
    archived_ms INTEGER NOT NULL
);
CREATE TRIGGER archives_grow BEFORE INSERT ON archives
WHEN NEW.before <= (SELECT coalesce(max(before), 0) FROM archives)
  OR NEW.before > (SELECT coalesce(max(size), 0) FROM checkpoints)
BEGIN
    SELECT RAISE(ABORT, 'an archive extends the last one, up to a checkpointed size');
END;
CREATE TRIGGER archives_immutable BEFORE UPDATE ON archives
BEGIN
    SELECT RAISE(ABORT, 'archives are never rewritten');
END;
CREATE TRIGGER archives_kept BEFORE DELETE ON archives
BEGIN
    SELECT RAISE(ABORT, 'archives are never deleted');
END;

-- A receipt's row may go only once its range is archived; the next index
-- follows the archive when no row is left.
DROP TRIGGER receipts_kept;
CREATE TRIGGER receipts_kept BEFORE DELETE ON receipts
WHEN OLD.log_index >= (SELECT coalesce(max(before), 0) FROM archives)
BEGIN
    SELECT RAISE(ABORT, 'receipts are append-only: a receipt is never deleted, only archived');
END;
DROP TRIGGER receipts_contiguous;
CREATE TRIGGER receipts_contiguous BEFORE INSERT ON receipts
WHEN NEW.log_index != max((SELECT coalesce(max(log_index) + 1, 0) FROM receipts), (SELECT coalesce(max(before), 0) FROM archives))
BEGIN
    SELECT RAISE(ABORT, 'a receipt must take the next log index');
END;
DROP TRIGGER checkpoints_within_log;
CREATE TRIGGER checkpoints_within_log BEFORE INSERT ON checkpoints
WHEN NEW.size > max((SELECT coalesce(max(log_index) + 1, 0) FROM receipts), (SELECT coalesce(max(before), 0) FROM archives))
BEGIN
    SELECT RAISE(ABORT, 'a checkpoint cannot cover receipts the log does not hold');
END;
