UPDATE locksmith_entries SET expires_at = NOW(6) + INTERVAL ? MICROSECOND WHERE owner = ? AND held = 0 AND id IN ({ids})
