-- The columns of the holder kept in the row, added to a `locksmith_locks` made by an earlier
-- release (table_locks.sql has them). `queued` starts true: its rows may have entries.
ALTER TABLE locksmith_locks
    ADD COLUMN queued TINYINT NOT NULL DEFAULT 1,
    ADD COLUMN holder BIGINT UNSIGNED NULL,
    ADD COLUMN holder_owner BIGINT UNSIGNED NOT NULL DEFAULT 0,
    ADD COLUMN holder_ttl_us BIGINT UNSIGNED NOT NULL DEFAULT 0,
    ADD COLUMN holder_expires DATETIME(6) NULL,
    ADD KEY holder_owner (holder_owner)
