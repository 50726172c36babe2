SELECT o.id, o.conn_id FROM locksmith_watches w JOIN locksmith_owners o ON o.id = w.owner WHERE w.lock_id = ?
