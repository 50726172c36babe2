UPDATE {schema}.data SET value = $5::bytea
WHERE key = $4 AND value = $6::bytea AND EXISTS (SELECT 1 FROM held) RETURNING 1
