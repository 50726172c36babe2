UPDATE {schema}.entries SET token = $2,
expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond' WHERE id = $1
RETURNING ttl_ms
