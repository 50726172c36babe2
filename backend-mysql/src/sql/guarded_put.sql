INSERT INTO locksmith_data (k, v) VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)
