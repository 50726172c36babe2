-- Removes up to $2 lock rows idle for $1 milliseconds (idle.rs; `locksmith prune`): rows that no
-- entry is queued on (`queued` false: see schema.sql, the invariant grant_in_row decides on too),
-- with no live holder kept in the row (none, or its lease ended $1 ms ago), whose last fencing
-- token was handed out $1 ms ago or earlier (a token is at least the server's clock in
-- microseconds when it was handed out: token_after in alone.sql). Answers how many it removed (no
-- row: none; the mark is rewritten only when a row went).
--
-- Each row is locked as a step locks it (FOR UPDATE), skipping rows a step or a grant holds now
-- (SKIP LOCKED: a prune never waits for a lock in use, nor holds one up), and read again as
-- committed if a step changed it since the statement began: a row found queued or held then is
-- left alone.
--
-- The tokens never go backwards: the largest token of the rows removed is kept in the row
-- '{pruned}' (the high-water mark), which a lock's next row starts from (layout.rs's grant_in_row
-- and next_token). That row is locked first (hw), before any lock's row: grant_in_row's first use
-- of a name reads it FOR SHARE before it meets the name's row, so the two never wait for each
-- other in opposite orders, and a first use reads the mark only once no prune is under way.
WITH hw AS (
    SELECT h.token FROM {schema}.locks h WHERE h.segment = '{pruned}' FOR UPDATE
), gone AS (
    DELETE FROM {schema}.locks l
    WHERE l.segment IN (
        SELECT c.segment FROM {schema}.locks c
        WHERE EXISTS (SELECT 1 FROM hw)
          AND c.segment <> '{pruned}'
          AND NOT c.queued
          AND (c.holder IS NULL OR c.holder_expires <= clock_timestamp() - $1::bigint * interval '1 millisecond')
          AND c.token <= floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint - $1::bigint * 1000
        LIMIT $2::bigint
        FOR UPDATE SKIP LOCKED)
    RETURNING l.token
)
UPDATE {schema}.locks h
SET token = greatest(h.token, coalesce((SELECT max(token) FROM gone), 0))
WHERE h.segment = '{pruned}' AND EXISTS (SELECT 1 FROM gone)
RETURNING (SELECT count(*) FROM gone)
