-- Which of a locker's holders are held now, in its locks' rows or in the queues (one snapshot:
-- a holder is in one place or the other).
SELECT holder FROM locksmith_locks WHERE holder_owner = ? AND holder IN ({ids}) AND holder_expires >= NOW(6)
UNION ALL
SELECT id FROM locksmith_entries WHERE id IN ({ids}) AND held = 1 AND expires_at >= NOW(6)
