INSERT INTO {schema}.data (key, value) SELECT $4, $5::bytea FROM held
ON CONFLICT (key) DO NOTHING RETURNING 1
