-- Retention (issue "Evidence at line rate"): the ledger stays bounded.
-- A settled operation may go once it is older than the gateway's
-- `operation_ttl_ms` (its key then no longer deduplicates, as payment APIs
-- keep an idempotency key for a set time); one in flight or of unknown
-- outcome never goes. A checkpoint may go once an archive covers it: the
-- archive's own checkpoint, kept, signs a tree that contains it, and the
-- archive's tiles prove any receipt's inclusion and any consistency below.
DROP TRIGGER operations_no_delete;
CREATE TRIGGER operations_no_delete BEFORE DELETE ON operations
WHEN OLD.state IN ('reserved', 'dispatched', 'unknown')
BEGIN
    SELECT RAISE(ABORT, 'an operation in flight or of unknown outcome is never deleted');
END;
DROP TRIGGER checkpoints_kept;
CREATE TRIGGER checkpoints_kept BEFORE DELETE ON checkpoints
WHEN OLD.size >= (SELECT coalesce(max(before), 0) FROM archives)
BEGIN
    SELECT RAISE(ABORT, 'a checkpoint is never deleted unless an archive covers it');
END;

-- A page of the newest operations by this index, not a sort of the table:
-- a week of them is kept.
CREATE INDEX operations_created ON operations (created_ms);
