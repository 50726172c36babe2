SELECT pg_advisory_unlock_shared($1)
