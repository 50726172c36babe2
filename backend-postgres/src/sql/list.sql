-- `list`: every lock with live entries, and how many (the rule of prune.sql, read without locks),
-- a live holder kept in a lock's row (schema.sql) counted as one.
SELECT segment, count(*)
FROM (SELECT e.segment
      FROM {schema}.entries e LEFT JOIN {schema}.owners o ON o.id = e.owner
      WHERE (e.token IS NOT NULL AND e.expires_at > clock_timestamp())
         OR (e.token IS NULL AND o.expires_at > clock_timestamp())
      UNION ALL
      SELECT l.segment
      FROM {schema}.locks l
      WHERE l.holder IS NOT NULL AND l.holder_expires > clock_timestamp()) live
GROUP BY segment
