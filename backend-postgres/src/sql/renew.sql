-- renew_many: beats the locker $1 (for $2 ms at least) and extends every listed lease ($3) that
-- is still live by its own TTL, in one statement. Returns the ids renewed.
WITH beat AS (
    UPDATE {schema}.owners
    SET expires_at = greatest(expires_at, clock_timestamp() + $2::bigint * interval '1 millisecond')
    WHERE id = $1
)
UPDATE {schema}.entries
SET expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond'
WHERE id = ANY($3::text[]) AND owner = $1 AND token IS NOT NULL AND expires_at > clock_timestamp()
RETURNING id
