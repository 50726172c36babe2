-- A lock's row, made if missing (counter: the high-water mark of pruned tokens, see lock_row.sql).
INSERT IGNORE INTO locksmith_locks (segment, token)
SELECT ?, COALESCE(MAX(m.token), 0) FROM locksmith_locks m WHERE m.segment = '~pruned'
