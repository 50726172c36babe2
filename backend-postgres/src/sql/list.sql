-- `list`: every lock with live entries, and how many (the rule of prune.sql, read without locks).
SELECT e.segment, count(*)
FROM {schema}.entries e LEFT JOIN {schema}.owners o ON o.id = e.owner
WHERE (e.token IS NOT NULL AND e.expires_at > clock_timestamp())
   OR (e.token IS NULL AND o.expires_at > clock_timestamp())
GROUP BY e.segment
