WITH e AS (DELETE FROM {schema}.entries WHERE segment = $1 AND token IS NOT NULL RETURNING 1),
r AS (UPDATE {schema}.locks SET holder = NULL WHERE segment = $1 AND holder IS NOT NULL RETURNING 1)
SELECT (SELECT count(*) FROM e) + (SELECT count(*) FROM r)
