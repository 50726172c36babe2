SELECT lock_id, token FROM locksmith_locks WHERE segment = ? FOR UPDATE
