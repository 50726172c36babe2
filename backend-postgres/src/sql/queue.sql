-- The entries of lock $1 in arrival order, with the milliseconds until each expires unless
-- renewed (a holder: its lease; a waiter: its locker's heartbeat, none if its locker is gone),
-- and each one's place (seq). Its entries start at the lock's `since` (schema.sql). A holder kept
-- in the lock's row (schema.sql) comes first, as an exclusive entry of place 0: only reads
-- outside a step find one (a step's lock_row moved it into the entries).
SELECT l.holder AS id, 'exclusive' AS role, l.token, '' AS value, l.holder_pid AS pid, l.holder_host AS host,
       (extract(epoch FROM (l.holder_expires - clock_timestamp())) * 1000)::bigint AS left_ms,
       0::bigint AS seq
FROM {schema}.locks l
WHERE l.segment = $1 AND l.holder IS NOT NULL
UNION ALL
SELECT e.id, e.role, e.token, e.value, e.pid, e.host,
       (extract(epoch FROM (coalesce(e.expires_at, o.expires_at) - clock_timestamp())) * 1000)::bigint,
       e.seq
FROM {schema}.entries e LEFT JOIN {schema}.owners o ON o.id = e.owner
WHERE e.segment = $1
  AND e.seq >= coalesce((SELECT l.since FROM {schema}.locks l WHERE l.segment = $1), 0)
ORDER BY seq
