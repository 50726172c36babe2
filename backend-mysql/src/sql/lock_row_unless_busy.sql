SELECT lock_id FROM locksmith_locks WHERE segment = ? FOR UPDATE SKIP LOCKED
