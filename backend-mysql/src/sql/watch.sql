INSERT IGNORE INTO locksmith_watches (lock_id, owner) SELECT lock_id, ? FROM locksmith_locks WHERE segment = ?
