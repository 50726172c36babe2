-- Up to ? lock rows idle for ? µs: no entry, watch or wake-up of theirs, no live holder in the
-- row, and their last token
-- (at least the server's clock in µs when it was handed out, next_token.sql) that long ago or
-- more. Locked, skipping the rows a step holds now (a prune never waits for a lock in use); the
-- delete checks again, in a statement of its own, once they are locked (prune_delete.sql).
SELECT l.lock_id, l.token FROM locksmith_locks l
WHERE l.segment NOT IN ('~pruned', '~pruned-at')
  AND CAST(l.token AS SIGNED) <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) - ?
  AND (l.holder IS NULL OR l.holder_expires < NOW(6))
  AND NOT EXISTS (SELECT 1 FROM locksmith_entries e WHERE e.lock_id = l.lock_id)
  AND NOT EXISTS (SELECT 1 FROM locksmith_watches w WHERE w.lock_id = l.lock_id)
  AND NOT EXISTS (SELECT 1 FROM locksmith_wakes k WHERE k.lock_id = l.lock_id)
LIMIT ? FOR UPDATE SKIP LOCKED
