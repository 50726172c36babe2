-- What lockers unseen for an hour left (their owner row is touched every minute): the owner row,
-- its mailbox rows and its watches, in one statement, so that no row of a dead locker is left
-- without its owner row (three statements run beside another locker's could be split by it).
DELETE o, w, t
FROM locksmith_owners o
LEFT JOIN locksmith_wakes w ON w.owner = o.id
LEFT JOIN locksmith_watches t ON t.owner = o.id
WHERE o.seen_at < NOW(6) - INTERVAL 1 HOUR
