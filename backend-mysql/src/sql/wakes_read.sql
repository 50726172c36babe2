SELECT w.seq, w.entry, l.segment FROM locksmith_wakes w JOIN locksmith_locks l ON l.lock_id = w.lock_id
WHERE w.owner = ? ORDER BY w.seq
