INSERT INTO {schema}.locks AS l (segment, token, queued, holder, holder_owner,
holder_ttl_ms, holder_expires, holder_pid, holder_host)
SELECT $1, f.first, false,
CASE WHEN f.first > 0 THEN $2::text END, CASE WHEN f.first > 0 THEN $3::text END,
CASE WHEN f.first > 0 THEN $4::bigint END,
CASE WHEN f.first > 0 THEN clock_timestamp() + $4::bigint * interval '1 millisecond' END,
CASE WHEN f.first > 0 THEN $5::integer END, CASE WHEN f.first > 0 THEN $6::text END
FROM (SELECT CASE WHEN EXISTS (SELECT 1 FROM {schema}.locks WHERE segment = $1) THEN 0::bigint
ELSE coalesce((SELECT {schema}.token_after(h.token) FROM {schema}.locks h
WHERE h.segment = '{pruned}' FOR SHARE), 0) END AS first OFFSET 0) f
ON CONFLICT (segment) DO UPDATE SET token = {schema}.token_after(l.token),
holder = $2::text, holder_owner = $3::text, holder_ttl_ms = $4::bigint,
holder_expires = clock_timestamp() + $4::bigint * interval '1 millisecond',
holder_pid = $5::integer, holder_host = $6::text
WHERE NOT l.queued AND l.token <> 0 AND (l.holder IS NULL OR l.holder_expires <= clock_timestamp())
RETURNING CASE WHEN l.holder IS NOT NULL THEN l.token END AS token
