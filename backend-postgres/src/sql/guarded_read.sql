SELECT value FROM {schema}.data WHERE key = $1
