SELECT id, owner, role, permits, held, token, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at) AS left_us, value
FROM locksmith_entries WHERE lock_id = ? ORDER BY seq
