-- A lock's holder kept in its row (sql/proc_enter.sql), if live: id, locker, token, µs left.
SELECT holder, holder_owner, token, TIMESTAMPDIFF(MICROSECOND, NOW(6), holder_expires)
FROM locksmith_locks WHERE segment = ? AND holder IS NOT NULL AND holder_expires >= NOW(6)
