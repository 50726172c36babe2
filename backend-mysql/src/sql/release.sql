DELETE FROM locksmith_entries WHERE id = ? AND held = 1 AND token = ?
