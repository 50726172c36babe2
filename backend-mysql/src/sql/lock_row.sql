-- Locks a lock's row, made at its first use with the high-water mark of pruned tokens
-- (prune_mark.sql) as its counter, so that a name pruned and used again hands out tokens above
-- every earlier one of it even with the server's clock set back. The step may queue entries:
-- `queued` is set, so no holder is granted in the row until a call finds the queue empty.
INSERT INTO locksmith_locks (segment, token, queued)
SELECT ?, COALESCE(MAX(m.token), 0), 1 FROM locksmith_locks m WHERE m.segment = '~pruned'
ON DUPLICATE KEY UPDATE locksmith_locks.queued = 1
