DELETE FROM locksmith_entries WHERE id = ?
