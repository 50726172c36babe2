-- The common cases in one round trip each (one statement, its own transaction), for the
-- exclusive kinds that nobody observes (mutexes, writers). Each locks the lock's row first, as
-- every step does, and answers NULL when its case does not apply: the caller then takes the full
-- step (`conn/txn.rs`), which decides with locksmith-core's queue rule. Their cases are ones that rule
-- decides alike on every backend: an exclusive entry on a queue with no live entry holds; when
-- the holder of a queue of exclusive entries leaves, the first waiter holds.

-- token_after: the fencing token that follows p_last, a lock's last_token: above it, and at
-- least the server's clock in microseconds since the Unix epoch. The clock is what keeps tokens
-- above every earlier one when the server lost commits that handed tokens out (a failover to a
-- standby that had not received them, `replication=async`; a restore from a backup): the counter
-- alone would hand those tokens out again. Every grant takes its token here (grant_alone,
-- leave_exclusive, and the full step's `next_token` in layout.rs).
CREATE OR REPLACE FUNCTION {schema}.token_after(p_last bigint)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT greatest(p_last + 1, floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
$$;

-- grant_alone: entry p_id (exclusive) holds lock p_segment at once if no live entry is there
-- (the rule of prune.sql); returns its fencing token, or NULL. Lock the lock's row (inserting it
-- if missing), read what is left of the queue from `since` on, and move the token on with the
-- entry inserted. Dead entries are left to the next full step's prune (they decide nothing:
-- every step and every function counts live entries only); with none left at all, `since`
-- moves up to the new entry, so that the next read skips every entry deleted before it.
CREATE OR REPLACE FUNCTION {schema}.grant_alone(
    p_segment text, p_id text, p_owner text, p_ttl_ms bigint, p_pid integer, p_host text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_since bigint;
    v_live boolean;
    v_first bigint;
    v_seq bigint;
    v_token bigint;
BEGIN
    INSERT INTO {schema}.locks AS l (segment) VALUES (p_segment)
    ON CONFLICT (segment) DO UPDATE SET last_token = l.last_token
    RETURNING since INTO v_since;
    -- Each statement sees what committed before the row lock was granted (READ COMMITTED).
    SELECT coalesce(bool_or((e.token IS NOT NULL AND e.expires_at > clock_timestamp())
                            OR (e.token IS NULL AND o.expires_at > clock_timestamp())), false),
           min(e.seq)
    INTO v_live, v_first
    FROM {schema}.entries e LEFT JOIN {schema}.owners o ON o.id = e.owner
    WHERE e.segment = p_segment AND e.seq >= v_since;
    IF v_live THEN
        RETURN NULL;
    END IF;
    v_seq := nextval('{schema}.entries_seq_seq');
    UPDATE {schema}.locks SET last_token = {schema}.token_after(last_token), since = greatest(since, coalesce(v_first, v_seq))
    WHERE segment = p_segment
    RETURNING last_token INTO v_token;
    INSERT INTO {schema}.entries (id, segment, seq, owner, role, value, ttl_ms, token, expires_at, pid, host)
    VALUES (p_id, p_segment, v_seq, p_owner, 'exclusive', '', p_ttl_ms, v_token,
            clock_timestamp() + p_ttl_ms * interval '1 millisecond', p_pid, p_host);
    RETURN v_token;
END $$;

-- leave_exclusive: entry p_id, a live holder, leaves lock p_segment, whose other entries are all
-- live exclusive waiters (or none): the first of them holds now (the queue rule for a queue of
-- exclusive entries), and the NOTIFY on channel p_channel names it with its fencing token and
-- the next one, as `wake::payload` writes it. Returns true, or NULL when the queue is anything
-- else (a reader, a dead entry, an unexpected holder): the full step then decides. Three
-- statements when nobody waits: lock the row, read the queue (one pass), delete.
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
        RETURN true;
    END IF;
    -- The next holder is the first entry left: the queue is read from it on.
    WITH t AS (UPDATE {schema}.locks SET last_token = {schema}.token_after(last_token), since = greatest(since, v_next)
               WHERE segment = p_segment
               RETURNING last_token)
    UPDATE {schema}.entries SET token = t.last_token,
        expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond'
    FROM t WHERE id = v_waiting[1]
    RETURNING ttl_ms, token INTO v_ms, v_token;
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
