-- Drops the dead entries of lock $1: holders whose lease expired (server clock) or whose locker
-- shut down, waiters whose locker stopped beating. Run with the lock's row locked.
DELETE FROM {schema}.entries e
WHERE e.segment = $1
  AND ((e.token IS NOT NULL AND e.expires_at <= clock_timestamp())
       OR NOT EXISTS (SELECT 1 FROM {schema}.owners o
                      WHERE o.id = e.owner
                        AND (e.token IS NOT NULL OR o.expires_at > clock_timestamp())))
