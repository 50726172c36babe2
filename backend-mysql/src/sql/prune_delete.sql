-- Deletes the candidates locked by prune_candidates.sql that are still idle: this statement's
-- reads see every step committed before the rows were locked (a step committed between the
-- candidates' snapshot and their locking is seen here), and no step can change them since.
DELETE FROM locksmith_locks
WHERE lock_id IN ({ids})
  AND CAST(token AS SIGNED) <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) - ?
  AND (holder IS NULL OR holder_expires < NOW(6))
  AND NOT EXISTS (SELECT 1 FROM locksmith_entries e WHERE e.lock_id = locksmith_locks.lock_id)
  AND NOT EXISTS (SELECT 1 FROM locksmith_watches w WHERE w.lock_id = locksmith_locks.lock_id)
  AND NOT EXISTS (SELECT 1 FROM locksmith_wakes k WHERE k.lock_id = locksmith_locks.lock_id)
