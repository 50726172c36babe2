SELECT s, CAST(SUM(n) AS SIGNED) FROM (
    SELECT l.segment AS s, COUNT(*) AS n FROM locksmith_locks l JOIN locksmith_entries e ON e.lock_id = l.lock_id
    WHERE e.expires_at >= NOW(6) GROUP BY l.segment
    UNION ALL
    SELECT segment AS s, 1 AS n FROM locksmith_locks WHERE holder IS NOT NULL AND holder_expires >= NOW(6)
) t GROUP BY s
