SELECT CAST(holder AS CHAR) FROM locksmith_locks WHERE segment = ? AND holder IS NOT NULL
UNION ALL
SELECT CAST(e.id AS CHAR) FROM locksmith_entries e JOIN locksmith_locks l ON l.lock_id = e.lock_id WHERE l.segment = ?
