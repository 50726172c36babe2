-- renew_many: extends every listed lease ($2) of locker $1 that is still live by its own TTL,
-- in one statement. Returns the ids renewed. (It does not beat the locker's owner row: a holder
-- lives by its lease alone, and the waiters' heartbeat has a statement of its own.)
-- The leases are joined from the array, not matched with `id = ANY($2)`: this statement is
-- prepared once per connection, and PostgreSQL's generic plan for `= ANY(<parameter>)` scans the
-- whole table comparing every row with every id (10,000 leases took over a second, and were lost).
UPDATE {schema}.entries e
SET expires_at = clock_timestamp() + e.ttl_ms * interval '1 millisecond'
FROM unnest($2::text[]) AS renewed(id)
WHERE e.id = renewed.id AND e.owner = $1 AND e.token IS NOT NULL AND e.expires_at > clock_timestamp()
RETURNING e.id
