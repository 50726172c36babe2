-- Claims the next automatic pass of pruning (prune.rs) if the last began ? µs ago or more: sets
-- the row '~pruned-at' to now and changes one row; otherwise none. So the tables are pruned about
-- that often however many lockers use them, and a process that lives milliseconds (a `locksmith
-- run`) runs the pass when it connects at a time one is due. Concurrent claims queue on the row's
-- lock: the second reads the first's new time and changes nothing.
UPDATE locksmith_locks
SET token = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)
WHERE segment = '~pruned-at'
  AND CAST(token AS SIGNED) <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) - ?
