INSERT INTO {schema}.locks (segment, token, queued) VALUES ('{pruned}', 0, false)
ON CONFLICT (segment) DO NOTHING
