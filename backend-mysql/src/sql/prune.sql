DELETE FROM locksmith_entries WHERE lock_id = ? AND expires_at < NOW(6)
