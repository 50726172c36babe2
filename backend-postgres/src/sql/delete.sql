DELETE FROM {schema}.entries WHERE id = $1 RETURNING token IS NOT NULL
