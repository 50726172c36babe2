SELECT pg_advisory_lock_shared($1)
