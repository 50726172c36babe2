UPDATE locksmith_entries SET expires_at = NOW(6) + INTERVAL ttl_us MICROSECOND
WHERE id IN ({ids}) AND held = 1 AND expires_at >= NOW(6)
