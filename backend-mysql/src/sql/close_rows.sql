UPDATE locksmith_locks SET holder = NULL WHERE holder_owner = ? AND holder IS NOT NULL
