-- The uncontended cases in one round trip each (one statement, its own transaction), for the
-- exclusive kinds that nobody observes (mutexes, writers). Each locks the lock's row first, as
-- every step does, and answers NULL when its case does not apply: the caller then takes the full
-- step (`conn/txn.rs`), which decides with lockcore's queue rule. Their cases are ones that rule
-- decides alike on every backend: an exclusive entry on a queue with no live entry holds; the
-- only entry of a queue leaving wakes nobody.

-- grant_alone: entry p_id (exclusive) holds lock p_segment at once if no live entry is there
-- (the rule of prune.sql); returns its fencing token, or NULL.
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
    DELETE FROM {schema}.entries WHERE segment = p_segment; -- dead ones only
    UPDATE {schema}.locks SET last_token = last_token + 1 WHERE segment = p_segment
    RETURNING last_token INTO v_token;
    INSERT INTO {schema}.entries (id, segment, owner, role, value, ttl_ms, token, expires_at, pid, host)
    VALUES (p_id, p_segment, p_owner, 'exclusive', '', p_ttl_ms, v_token,
            clock_timestamp() + p_ttl_ms * interval '1 millisecond', p_pid, p_host);
    RETURN v_token;
END $$;

-- leave_alone: removes entry p_id, a live holder, if it is the only entry of lock p_segment
-- (nobody to hand over to or to wake); returns true, or NULL.
CREATE OR REPLACE FUNCTION {schema}.leave_alone(p_segment text, p_id text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM {schema}.locks WHERE segment = p_segment FOR UPDATE;
    IF EXISTS (SELECT 1 FROM {schema}.entries WHERE segment = p_segment AND id <> p_id) THEN
        RETURN NULL;
    END IF;
    DELETE FROM {schema}.entries
    WHERE id = p_id AND segment = p_segment AND token IS NOT NULL AND expires_at > clock_timestamp();
    IF FOUND THEN
        RETURN true;
    END IF;
    RETURN NULL;
END $$;
