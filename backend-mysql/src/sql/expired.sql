SELECT l.segment FROM locksmith_locks l
WHERE l.lock_id IN (SELECT lock_id FROM locksmith_entries WHERE owner = ? AND held = 0)
AND EXISTS (SELECT 1 FROM locksmith_entries e WHERE e.lock_id = l.lock_id AND e.expires_at < NOW(6))
LIMIT 16
