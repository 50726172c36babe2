INSERT INTO locksmith_wakes (owner, entry, lock_id) VALUES (?, ?, ?)
