SELECT DISTINCT l.segment FROM locksmith_entries e JOIN locksmith_locks l ON l.lock_id = e.lock_id
WHERE e.expires_at < NOW(6) LIMIT 16
