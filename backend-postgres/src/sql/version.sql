SELECT value FROM {schema}.meta WHERE key = 'version'
