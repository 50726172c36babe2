-- What a prune would remove now (a dry run): as prune_candidates.sql, counted, nothing locked.
SELECT COUNT(*) FROM locksmith_locks l
WHERE l.segment NOT IN ('~pruned', '~pruned-at')
  AND CAST(l.token AS SIGNED) <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) - ?
  AND (l.holder IS NULL OR l.holder_expires < NOW(6))
  AND NOT EXISTS (SELECT 1 FROM locksmith_entries e WHERE e.lock_id = l.lock_id)
  AND NOT EXISTS (SELECT 1 FROM locksmith_watches w WHERE w.lock_id = l.lock_id)
  AND NOT EXISTS (SELECT 1 FROM locksmith_wakes k WHERE k.lock_id = l.lock_id)
