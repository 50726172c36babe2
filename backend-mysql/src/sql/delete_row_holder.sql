UPDATE locksmith_locks SET holder = NULL WHERE segment = ? AND holder IS NOT NULL
