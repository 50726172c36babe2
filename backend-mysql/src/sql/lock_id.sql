SELECT lock_id, token, holder IS NOT NULL FROM locksmith_locks WHERE segment = ? FOR UPDATE
