UPDATE {schema}.locks l SET token = {schema}.token_after(CASE WHEN l.token <> 0 THEN l.token
ELSE coalesce((SELECT h.token FROM {schema}.locks h WHERE h.segment = '{pruned}'), 0) END)
WHERE l.segment = $1 RETURNING l.token
