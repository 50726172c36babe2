WITH taken AS ({grant_in_row}) SELECT (SELECT token FROM taken),
EXISTS (SELECT 1 FROM {schema}.locks WHERE segment = $1 AND NOT queued AND token <> 0
AND (holder IS NULL
OR holder_expires <= clock_timestamp() + holder_ttl_ms * interval '1 millisecond'))
