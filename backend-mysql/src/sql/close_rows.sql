UPDATE locksmith_locks SET holder = NULL, holder_owner = 0 WHERE holder_owner = ? AND holder IS NOT NULL
