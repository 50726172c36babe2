UPDATE locksmith_locks SET holder = NULL, holder_owner = 0 WHERE lock_id = ?
