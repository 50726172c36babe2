SELECT pg_try_advisory_lock_shared($1)
