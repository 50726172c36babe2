-- Removes up to $2 owner rows of lockers whose heartbeat ended $1 milliseconds ago and that no
-- entry names (the dead entries of a lock go with its row, or with a step on it). A locker that
-- is alive after all beats again (its heartbeat inserts the row anew) before it waits. Answers
-- how many it removed.
WITH gone AS (
    DELETE FROM {schema}.owners o
    WHERE o.id IN (
        SELECT c.id FROM {schema}.owners c
        WHERE c.expires_at <= clock_timestamp() - $1::bigint * interval '1 millisecond'
          AND NOT EXISTS (SELECT 1 FROM {schema}.entries e WHERE e.owner = c.id)
        LIMIT $2::bigint
        FOR UPDATE SKIP LOCKED)
      AND o.expires_at <= clock_timestamp() - $1::bigint * interval '1 millisecond'
    RETURNING 1
)
SELECT count(*) FROM gone
