-- The locks whose queues hold waiters of lockers that stopped beating (a process that died or
-- froze): a step on each drops them and passes the lock on. Waiting lockers run it after their
-- heartbeat, so dead waiters at the head of a queue never hold up the live ones behind them
-- (only the first waiter of a queue watches the holders' expiry).
-- It also forgets the owner rows of lockers gone for 10 minutes that left no entry behind.
WITH forgotten AS (
    DELETE FROM {schema}.owners o
    WHERE o.expires_at < clock_timestamp() - interval '10 minutes'
      AND NOT EXISTS (SELECT 1 FROM {schema}.entries e WHERE e.owner = o.id)
)
SELECT DISTINCT e.segment
FROM {schema}.owners o JOIN {schema}.entries e ON e.owner = o.id
WHERE o.expires_at <= clock_timestamp() AND e.token IS NULL
LIMIT 100
