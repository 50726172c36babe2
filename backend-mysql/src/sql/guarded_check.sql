SELECT 1 FROM locksmith_entries WHERE id = ? AND held = 1 AND token = ? AND expires_at >= NOW(6) FOR UPDATE
