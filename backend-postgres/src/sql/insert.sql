INSERT INTO {schema}.entries (id, segment, owner, role, value, ttl_ms, token, expires_at, pid, host)
VALUES ($1, $2, $3, $4, $5, $6::bigint, $7::bigint,
CASE WHEN $7::bigint IS NULL THEN NULL ELSE clock_timestamp() + $6::bigint * interval '1 millisecond' END, $8, $9)
