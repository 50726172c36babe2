UPDATE locksmith_entries SET held = 1, token = ?, expires_at = NOW(6) + INTERVAL ttl_us MICROSECOND WHERE id = ?
