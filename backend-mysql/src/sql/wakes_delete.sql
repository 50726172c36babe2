DELETE FROM locksmith_wakes WHERE owner = ? AND seq <= ?
