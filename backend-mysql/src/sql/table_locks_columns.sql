-- Whether `locksmith_locks` has the columns of the holder kept in the row: this fails with error
-- 1054 on a table made by an earlier release, and conn/mod.rs then adds them
-- (table_locks_holder.sql). Not a read of information_schema.COLUMNS, which took 0.4-3.7 ms of
-- every connect on MariaDB 10.11 here, against 0.1 ms.
SELECT holder FROM locksmith_locks LIMIT 0
