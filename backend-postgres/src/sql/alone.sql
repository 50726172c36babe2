-- The functions of the schema: the fencing tokens (token_after), a full step's lock of the row
-- (lock_row), the renewals (renew_leases), and the hand-over in one round trip (leave_exclusive,
-- for the exclusive kinds that nobody observes: mutexes, writers). leave_exclusive answers NULL
-- when its case does not apply: the caller then takes the full step (`conn/txn.rs`), which
-- decides with locksmith-core's queue rule. Its case is one that rule decides alike on every
-- backend: when the holder of a queue of exclusive entries leaves, the first waiter holds.
--
-- Where a holder is kept: a lock taken when nobody else wanted it keeps its holder in its own row
-- (locks.holder, schema.sql), granted and freed by a plain statement each (layout.rs's
-- grant_in_row and leave). A full step moves it into the entries first (lock_row), so that the
-- queue rule, the waiters' grants and every clean-up see one queue; it never moves back (a later
-- uncontended grant is a new holder). A renewal and a guarded write look in both places.

-- token_after: the fencing token that follows p_last, a lock's token: above it, and at
-- least the server's clock in microseconds since the Unix epoch. The clock is what keeps tokens
-- above every earlier one when the server lost commits that handed tokens out (a failover to a
-- standby that had not received them, `replication=async`; a restore from a backup): the counter
-- alone would hand those tokens out again. Every grant takes its token here (layout.rs's
-- grant_in_row and next_token, and leave_exclusive).
CREATE OR REPLACE FUNCTION {schema}.token_after(p_last bigint)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT greatest(p_last + 1, floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
$$;

-- lock_row: locks lock p_segment's row for a full step (inserting it if missing) and moves a
-- holder kept in the row into the entries (with its id, token and lease as they are, alive or
-- not: the step's prune then judges it as any entry; the row is `queued` from then on, see
-- schema.sql). Returns the lock's token.
CREATE OR REPLACE FUNCTION {schema}.lock_row(p_segment text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_row {schema}.locks%ROWTYPE;
BEGIN
    INSERT INTO {schema}.locks AS l (segment) VALUES (p_segment)
    ON CONFLICT (segment) DO UPDATE SET token = l.token
    RETURNING l.* INTO v_row;
    IF v_row.holder IS NOT NULL THEN
        INSERT INTO {schema}.entries (id, segment, owner, role, value, ttl_ms, token, expires_at, pid, host)
        VALUES (v_row.holder, p_segment, v_row.holder_owner, 'exclusive', '', v_row.holder_ttl_ms,
                v_row.token, v_row.holder_expires, v_row.holder_pid, v_row.holder_host);
        UPDATE {schema}.locks SET holder = NULL, queued = true WHERE segment = p_segment;
    END IF;
    RETURN v_row.token;
END $$;

-- renew_leases: extends every listed lease of locker p_owner that is still live by its own TTL
-- (p_ids[i] on lock p_segments[i]), wherever it is kept; returns the ids renewed. The lock rows
-- first: a step that moves a holder from its row into the entries (lock_row) holds the row's lock
-- until it commits, so the second statement, which reads with a newer snapshot, finds it there.
-- The leases are joined from the arrays, not matched with `= ANY(...)`: PostgreSQL's generic
-- plan for `= ANY(<parameter>)` scans the whole table comparing every row with every id (10,000
-- leases took over a second, and were lost). (It does not beat the locker's owner row: a holder
-- lives by its lease alone, and the waiters' heartbeat has a statement of its own.)
CREATE OR REPLACE FUNCTION {schema}.renew_leases(p_owner text, p_ids text[], p_segments text[])
RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    UPDATE {schema}.locks l
    SET holder_expires = clock_timestamp() + l.holder_ttl_ms * interval '1 millisecond'
    FROM unnest(p_segments, p_ids) AS renewed(segment, id)
    WHERE l.segment = renewed.segment AND l.holder = renewed.id AND l.holder_owner = p_owner
      AND l.holder_expires > clock_timestamp()
    RETURNING l.holder;
    RETURN QUERY
    UPDATE {schema}.entries e
    SET expires_at = clock_timestamp() + e.ttl_ms * interval '1 millisecond'
    FROM unnest(p_ids) AS renewed(id)
    WHERE e.id = renewed.id AND e.owner = p_owner AND e.token IS NOT NULL AND e.expires_at > clock_timestamp()
    RETURNING e.id;
END $$;

-- leave_exclusive: entry p_id, a live holder, leaves lock p_segment, whose other entries are all
-- live exclusive waiters (or none): the first of them holds now (the queue rule for a queue of
-- exclusive entries), and the NOTIFY on channel p_channel names it with its fencing token and
-- the next one, as `wake::payload` writes it. Returns true, or NULL when the queue is anything
-- else (a reader, a dead entry, an unexpected holder): the full step then decides. Three
-- statements when nobody waits: lock the row, read the queue (one pass), delete (and mark the
-- row not `queued`). A holder kept in the lock's row is freed before this is called (layout.rs's
-- `leave`).
CREATE OR REPLACE FUNCTION {schema}.leave_exclusive(p_segment text, p_id text, p_channel text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_since bigint;
    v_mine boolean;
    v_clean boolean;
    v_waiting text[];
    v_next bigint;
    v_ms bigint;
    v_token bigint;
    v_payload text;
BEGIN
    SELECT since INTO v_since FROM {schema}.locks WHERE segment = p_segment FOR UPDATE;
    SELECT coalesce(bool_or(e.id = p_id AND e.token IS NOT NULL AND e.expires_at > clock_timestamp()), false),
           coalesce(bool_and(e.id = p_id
                             OR (e.role = 'exclusive' AND e.token IS NULL
                                 AND coalesce(o.expires_at > clock_timestamp(), false))), true),
           array_agg(e.id ORDER BY e.seq) FILTER (WHERE e.id <> p_id),
           min(e.seq) FILTER (WHERE e.id <> p_id)
    INTO v_mine, v_clean, v_waiting, v_next
    FROM {schema}.entries e LEFT JOIN {schema}.owners o ON o.id = e.owner
    WHERE e.segment = p_segment AND e.seq >= coalesce(v_since, 0);
    IF NOT v_mine OR NOT v_clean THEN
        RETURN NULL;
    END IF;
    DELETE FROM {schema}.entries WHERE id = p_id;
    IF v_waiting IS NULL THEN
        UPDATE {schema}.locks SET queued = false WHERE segment = p_segment;
        RETURN true;
    END IF;
    -- The next holder is the first entry left: the queue is read from it on.
    WITH t AS (UPDATE {schema}.locks SET token = {schema}.token_after(token), since = greatest(since, v_next)
               WHERE segment = p_segment
               RETURNING token)
    UPDATE {schema}.entries SET token = t.token,
        expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond'
    FROM t WHERE id = v_waiting[1]
    RETURNING {schema}.entries.ttl_ms, {schema}.entries.token INTO v_ms, v_token;
    v_payload := 'h' || v_waiting[1] || ':' || v_token;
    IF array_length(v_waiting, 1) > 1 THEN
        v_payload := v_payload || ',f' || v_waiting[2] || ':' || v_ms;
    END IF;
    IF octet_length(v_payload) + 1 + octet_length(p_segment) > 7900 THEN
        v_payload := '*';
    END IF;
    PERFORM pg_notify(p_channel, v_payload || '|' || p_segment);
    RETURN true;
END $$;
