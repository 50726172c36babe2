-- The leases of a locker's holders kept in their locks' rows: renewed before its entries
-- (renew.sql), so that a holder that a step moves into the queue between the two statements is
-- renewed by the second (a step holds the row's lock while it moves it).
UPDATE locksmith_locks SET holder_expires = NOW(6) + INTERVAL holder_ttl_us MICROSECOND
WHERE holder_owner = ? AND holder IN ({ids}) AND holder_expires >= NOW(6)
