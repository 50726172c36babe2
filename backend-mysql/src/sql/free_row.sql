UPDATE locksmith_locks SET holder = NULL WHERE lock_id = ?
