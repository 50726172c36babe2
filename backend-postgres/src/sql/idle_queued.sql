-- Up to $2 locks idle for $1 milliseconds (the rule of idle_locks.sql) whose row says entries are
-- queued but whose entries are all dead (prune.sql's rule: expired holders, waiters of lockers
-- that stopped beating), or gone (a locker's shutdown removes its entries without the row's
-- lock): a step on each (a sweep) drops them and clears `queued`, and idle_locks.sql then removes
-- the row. Read without locks: the step decides under the row's lock.
SELECT c.segment FROM {schema}.locks c
WHERE c.queued
  AND c.segment <> '{pruned}'
  AND (c.holder IS NULL OR c.holder_expires <= clock_timestamp() - $1::bigint * interval '1 millisecond')
  AND c.token <= floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint - $1::bigint * 1000
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.entries e LEFT JOIN {schema}.owners o ON o.id = e.owner
      WHERE e.segment = c.segment
        AND ((e.token IS NOT NULL AND e.expires_at > clock_timestamp())
             OR (e.token IS NULL AND o.expires_at > clock_timestamp())))
LIMIT $2::bigint
