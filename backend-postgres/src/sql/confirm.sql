UPDATE {schema}.entries SET expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond'
WHERE id = $1 AND token IS NOT NULL AND expires_at > clock_timestamp() RETURNING token
