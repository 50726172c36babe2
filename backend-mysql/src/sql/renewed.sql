SELECT id FROM locksmith_entries WHERE id IN ({ids}) AND held = 1 AND expires_at >= NOW(6)
