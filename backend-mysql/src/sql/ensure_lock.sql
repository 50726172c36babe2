INSERT IGNORE INTO locksmith_locks (segment) VALUES (?)
