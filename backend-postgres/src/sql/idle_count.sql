-- `locksmith prune --dry-run`: how many lock rows (idle_locks.sql's, and idle_queued.sql's whose
-- dead entries a step would drop first) and owner rows (idle_owners.sql's) a prune with an idle
-- time of $1 milliseconds would remove now. Read without locks.
SELECT (SELECT count(*) FROM {schema}.locks c
        WHERE c.segment <> '{pruned}'
          AND (c.holder IS NULL OR c.holder_expires <= clock_timestamp() - $1::bigint * interval '1 millisecond')
          AND c.token <= floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint - $1::bigint * 1000
          AND NOT EXISTS (
              SELECT 1 FROM {schema}.entries e LEFT JOIN {schema}.owners o ON o.id = e.owner
              WHERE e.segment = c.segment
                AND ((e.token IS NOT NULL AND e.expires_at > clock_timestamp())
                     OR (e.token IS NULL AND o.expires_at > clock_timestamp())))),
       (SELECT count(*) FROM {schema}.owners c
        WHERE c.expires_at <= clock_timestamp() - $1::bigint * interval '1 millisecond'
          AND NOT EXISTS (SELECT 1 FROM {schema}.entries e WHERE e.owner = c.id))
