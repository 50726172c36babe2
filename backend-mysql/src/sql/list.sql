SELECT l.segment, COUNT(*) FROM locksmith_locks l JOIN locksmith_entries e ON e.lock_id = l.lock_id
WHERE e.expires_at >= NOW(6) GROUP BY l.segment
