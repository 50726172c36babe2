-- Drops the dead entries of lock $1: holders whose lease expired (server clock), waiters whose
-- locker stopped beating (or shut down: its owner row is gone). A holder lives by its lease
-- alone, whatever became of its locker's owner row (rows of lockers long gone are forgotten by
-- sweep.sql). Run with the lock's row locked. Its entries start at the lock's `since` (schema.sql).
-- First (bounded), a holder whose lease ends further ahead than its TTL is given its TTL from now:
-- the server's clock stepped back (leases are timestamps on it), and a holder that died would
-- otherwise keep the lock for the whole step. A live holder renewed less than a TTL ago, so it
-- loses nothing it believes in. (The two parts touch different rows: a bounded lease is ahead.)
WITH bounded AS (
    UPDATE {schema}.entries e
    SET expires_at = clock_timestamp() + e.ttl_ms * interval '1 millisecond'
    WHERE e.segment = $1
      AND e.seq >= coalesce((SELECT l.since FROM {schema}.locks l WHERE l.segment = $1), 0)
      AND e.token IS NOT NULL
      AND e.expires_at > clock_timestamp() + e.ttl_ms * interval '1 millisecond'
)
DELETE FROM {schema}.entries e
WHERE e.segment = $1
  AND e.seq >= coalesce((SELECT l.since FROM {schema}.locks l WHERE l.segment = $1), 0)
  AND ((e.token IS NOT NULL AND e.expires_at <= clock_timestamp())
       OR (e.token IS NULL
           AND NOT EXISTS (SELECT 1 FROM {schema}.owners o
                           WHERE o.id = e.owner AND o.expires_at > clock_timestamp())))
