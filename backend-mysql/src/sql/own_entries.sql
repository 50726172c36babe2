SELECT l.segment, e.id FROM locksmith_entries e JOIN locksmith_locks l ON l.lock_id = e.lock_id WHERE e.owner = ?
