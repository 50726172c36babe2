-- Locks a lock's row, made at its first use with the high-water mark of pruned tokens
-- (prune_mark.sql) as its counter, so that a name pruned and used again hands out tokens above
-- every earlier one of it even with the server's clock set back.
INSERT INTO locksmith_locks (segment, token)
SELECT ?, COALESCE(MAX(m.token), 0) FROM locksmith_locks m WHERE m.segment = '~pruned'
ON DUPLICATE KEY UPDATE locksmith_locks.token = locksmith_locks.token
