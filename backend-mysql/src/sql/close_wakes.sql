DELETE FROM locksmith_wakes WHERE owner = ?
