UPDATE locksmith_locks
SET token = GREATEST(token + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED))
WHERE lock_id = ?
