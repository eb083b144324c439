-- The dictionary of digests: see the SQLite migration of the same number.
CREATE TABLE digests (
    id      BIGSERIAL PRIMARY KEY,
    digest  BYTEA NOT NULL UNIQUE CHECK (length(digest) IN (16, 32))
);
CREATE FUNCTION digests_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a digest''s number is never changed or removed: rows name it';
END $$;
CREATE TRIGGER digests_guard BEFORE UPDATE OR DELETE ON digests FOR EACH ROW EXECUTE FUNCTION digests_guard();
