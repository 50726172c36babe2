INSERT INTO locksmith_owners (id, conn_id, seen_at) VALUES (?, CONNECTION_ID(), NOW(6))
ON DUPLICATE KEY UPDATE conn_id = VALUES(conn_id), seen_at = VALUES(seen_at)
