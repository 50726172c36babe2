DELETE FROM locksmith_data WHERE k = ?
