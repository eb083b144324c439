-- The person behind the caller who asked (its subject), so that nobody
-- decides their own call under another credential. Rows from before keep
-- '' (the caller's name is then what is compared).
ALTER TABLE approvals ADD COLUMN subject TEXT NOT NULL DEFAULT '';
