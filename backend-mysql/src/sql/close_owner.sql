DELETE FROM locksmith_owners WHERE id = ?
