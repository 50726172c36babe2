UPDATE locksmith_entries SET expires_at = NOW(6) + INTERVAL ttl_us MICROSECOND WHERE id = ? AND held = 1
