DELETE w FROM locksmith_wakes w JOIN locksmith_owners o ON o.id = w.owner WHERE o.seen_at < NOW(6) - INTERVAL 1 HOUR
