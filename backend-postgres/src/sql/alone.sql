-- The common cases in one round trip each (one statement, its own transaction), for the
-- exclusive kinds that nobody observes (mutexes, writers). Each locks the lock's row first, as
-- every step does, and answers NULL when its case does not apply: the caller then takes the full
-- step (`conn/txn.rs`), which decides with locksmith-core's queue rule. Their cases are ones that rule
-- decides alike on every backend: an exclusive entry on a queue with no live entry holds; when
-- the holder of a queue of exclusive entries leaves, the first waiter holds.

-- grant_alone: entry p_id (exclusive) holds lock p_segment at once if no live entry is there
-- (the rule of prune.sql); returns its fencing token, or NULL. Three statements: lock the lock's
-- row (inserting it if missing), the check, and the token moved on with the entry inserted.
-- Dead entries are left to the next full step's prune (they decide nothing: every step and
-- every function counts live entries only).
CREATE OR REPLACE FUNCTION {schema}.grant_alone(
    p_segment text, p_id text, p_owner text, p_ttl_ms bigint, p_pid integer, p_host text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_token bigint;
BEGIN
    INSERT INTO {schema}.locks AS l (segment) VALUES (p_segment)
    ON CONFLICT (segment) DO UPDATE SET last_token = l.last_token;
    -- Each statement sees what committed before the row lock was granted (READ COMMITTED).
    IF EXISTS (SELECT 1 FROM {schema}.entries e LEFT JOIN {schema}.owners o ON o.id = e.owner
               WHERE e.segment = p_segment
                 AND ((e.token IS NOT NULL AND e.expires_at > clock_timestamp())
                      OR (e.token IS NULL AND o.expires_at > clock_timestamp()))) THEN
        RETURN NULL;
    END IF;
    WITH t AS (UPDATE {schema}.locks SET last_token = last_token + 1 WHERE segment = p_segment
               RETURNING last_token)
    INSERT INTO {schema}.entries (id, segment, owner, role, value, ttl_ms, token, expires_at, pid, host)
    SELECT p_id, p_segment, p_owner, 'exclusive', '', p_ttl_ms, t.last_token,
           clock_timestamp() + p_ttl_ms * interval '1 millisecond', p_pid, p_host
    FROM t
    RETURNING token INTO v_token;
    RETURN v_token;
END $$;

-- leave_exclusive: entry p_id, a live holder, leaves lock p_segment, whose other entries are all
-- live exclusive waiters (or none): the first of them holds now (the queue rule for a queue of
-- exclusive entries), and the NOTIFY on channel p_channel names it and the next one, as
-- `wake::payload` writes it. Returns true, or NULL when the queue is anything else (a reader, a
-- dead entry, an unexpected holder): the full step then decides. Three statements when nobody
-- waits: lock the row, read the queue (one pass), delete.
CREATE OR REPLACE FUNCTION {schema}.leave_exclusive(p_segment text, p_id text, p_channel text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_mine boolean;
    v_clean boolean;
    v_waiting text[];
    v_ms bigint;
    v_payload text;
BEGIN
    PERFORM 1 FROM {schema}.locks WHERE segment = p_segment FOR UPDATE;
    SELECT coalesce(bool_or(e.id = p_id AND e.token IS NOT NULL AND e.expires_at > clock_timestamp()), false),
           coalesce(bool_and(e.id = p_id
                             OR (e.role = 'exclusive' AND e.token IS NULL
                                 AND coalesce(o.expires_at > clock_timestamp(), false))), true),
           array_agg(e.id ORDER BY e.seq) FILTER (WHERE e.id <> p_id)
    INTO v_mine, v_clean, v_waiting
    FROM {schema}.entries e LEFT JOIN {schema}.owners o ON o.id = e.owner
    WHERE e.segment = p_segment;
    IF NOT v_mine OR NOT v_clean THEN
        RETURN NULL;
    END IF;
    DELETE FROM {schema}.entries WHERE id = p_id;
    IF v_waiting IS NULL THEN
        RETURN true;
    END IF;
    WITH t AS (UPDATE {schema}.locks SET last_token = last_token + 1 WHERE segment = p_segment
               RETURNING last_token)
    UPDATE {schema}.entries SET token = t.last_token,
        expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond'
    FROM t WHERE id = v_waiting[1]
    RETURNING ttl_ms INTO v_ms;
    v_payload := 'g' || v_waiting[1];
    IF array_length(v_waiting, 1) > 1 THEN
        v_payload := v_payload || ',f' || v_waiting[2] || ':' || v_ms;
    END IF;
    IF octet_length(v_payload) + 1 + octet_length(p_segment) > 7900 THEN
        v_payload := '*';
    END IF;
    PERFORM pg_notify(p_channel, v_payload || '|' || p_segment);
    RETURN true;
END $$;
