-- Whether `locksmith_locks` has the columns of the holder kept in the row (a table made by an
-- earlier release has not): conn/mod.rs adds them (table_locks_holder.sql).
SELECT COUNT(*) FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'locksmith_locks' AND COLUMN_NAME = 'holder'
