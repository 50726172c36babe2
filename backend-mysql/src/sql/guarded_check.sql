SELECT 1 FROM locksmith_entries WHERE owner = ? AND id = ? AND held = 1 AND token = ? AND expires_at >= NOW(6) FOR UPDATE
