-- The dictionary of digests (issue "Evidence at line rate"): a receipt's row
-- names the digests that recur — the signing key's id, the tool's
-- definition, the policy version — by `id` once this table holds them
-- (`receipt::compact`). A row names an id forever: ids are never changed or
-- removed, and a row never names one before it is committed here.
CREATE TABLE digests (
    id      INTEGER PRIMARY KEY CHECK (id > 0),
    digest  BLOB NOT NULL UNIQUE CHECK (length(digest) IN (16, 32))
);
CREATE TRIGGER digests_immutable BEFORE UPDATE ON digests
BEGIN
    SELECT RAISE(ABORT, 'a digest''s number is never changed');
END;
CREATE TRIGGER digests_kept BEFORE DELETE ON digests
BEGIN
    SELECT RAISE(ABORT, 'a digest''s number is never removed: rows name it');
END;
