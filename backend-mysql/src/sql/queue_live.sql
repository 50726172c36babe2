SELECT e.id, e.owner, e.role, e.permits, e.held, e.token, TIMESTAMPDIFF(MICROSECOND, NOW(6), e.expires_at) AS left_us, e.value
FROM locksmith_locks l JOIN locksmith_entries e ON e.lock_id = l.lock_id
WHERE l.segment = ? AND e.expires_at >= NOW(6) ORDER BY e.seq
