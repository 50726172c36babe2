UPDATE locksmith_locks SET holder = NULL, holder_owner = 0 WHERE segment = ? AND holder IS NOT NULL
