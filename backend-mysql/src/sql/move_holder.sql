-- The holder kept in the lock's row (proc_enter.sql) moved into the queue, live or not, with its
-- id, token and lease, before a step reads the queue: every step then sees one queue. Its row
-- is locked by the step. The move is undone with the step when it rolls back.
INSERT INTO locksmith_entries (id, lock_id, owner, role, permits, value, ttl_us, held, token, expires_at)
SELECT holder, lock_id, holder_owner, 'x', 0, '', holder_ttl_us, 1, token, holder_expires
FROM locksmith_locks WHERE lock_id = ? AND holder IS NOT NULL
