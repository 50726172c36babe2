SELECT token FROM locksmith_locks WHERE lock_id = ?
