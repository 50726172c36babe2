INSERT INTO locksmith_entries (id, lock_id, owner, role, permits, value, ttl_us, held, token, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(6) + INTERVAL ? MICROSECOND)
