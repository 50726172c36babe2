INSERT INTO locksmith_locks (segment) VALUES (?) ON DUPLICATE KEY UPDATE token = token
