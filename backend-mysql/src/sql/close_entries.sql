DELETE FROM locksmith_entries WHERE owner = ?
