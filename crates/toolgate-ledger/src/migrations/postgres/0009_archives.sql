-- Archived ranges: see the SQLite migration of the same number.
CREATE TABLE archives (
    before      BIGINT PRIMARY KEY CHECK (before > 0 AND before % 256 = 0),
    root        BYTEA NOT NULL CHECK (length(root) = 32),
    frontier    BYTEA NOT NULL CHECK (length(frontier) % 32 = 0),
    archived_ms BIGINT NOT NULL
);
CREATE FUNCTION archives_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.before <= (SELECT coalesce(max(before), 0) FROM archives)
           OR NEW.before > (SELECT coalesce(max(size), 0) FROM checkpoints) THEN
            RAISE EXCEPTION 'an archive extends the last one, up to a checkpointed size';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'archives are never rewritten or deleted';
END $$;
CREATE TRIGGER archives_guard BEFORE INSERT OR UPDATE OR DELETE ON archives FOR EACH ROW EXECUTE FUNCTION archives_guard();

CREATE OR REPLACE FUNCTION receipts_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.log_index <> greatest((SELECT coalesce(max(log_index) + 1, 0) FROM receipts), (SELECT coalesce(max(before), 0) FROM archives)) THEN
            RAISE EXCEPTION 'a receipt must take the next log index';
        END IF;
        RETURN NEW;
    END IF;
    IF TG_OP = 'DELETE' AND OLD.log_index < (SELECT coalesce(max(before), 0) FROM archives) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'receipts are append-only: a receipt is never rewritten or deleted, only archived';
END $$;

CREATE OR REPLACE FUNCTION checkpoints_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.size > greatest((SELECT coalesce(max(log_index) + 1, 0) FROM receipts), (SELECT coalesce(max(before), 0) FROM archives)) THEN
            RAISE EXCEPTION 'a checkpoint cannot cover receipts the log does not hold';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'checkpoints are never rewritten or deleted';
END $$;
