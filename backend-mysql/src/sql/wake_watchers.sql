INSERT INTO locksmith_wakes (owner, entry, lock_id) SELECT owner, NULL, lock_id FROM locksmith_watches WHERE lock_id = ?
