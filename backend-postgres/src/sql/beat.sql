INSERT INTO {schema}.owners (id, expires_at, pid, host)
VALUES ($1, clock_timestamp() + $2::bigint * interval '1 millisecond', $3, $4)
ON CONFLICT (id) DO UPDATE SET expires_at = greatest({schema}.owners.expires_at, excluded.expires_at)
