UPDATE locksmith_locks SET token = GREATEST(token, ?) WHERE segment = '~pruned'
