WITH moved AS (UPDATE {schema}.locks l SET since = greatest(l.since, coalesce(
(SELECT min(e.seq) FROM {schema}.entries e WHERE e.segment = $1 AND e.seq >= l.since),
$2::bigint, l.since)),
queued = EXISTS (SELECT 1 FROM {schema}.entries e WHERE e.segment = $1 AND e.seq >= l.since)
WHERE l.segment = $1)
SELECT pg_notify($3, $4)
