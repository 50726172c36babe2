DELETE FROM locksmith_watches WHERE owner = ?
