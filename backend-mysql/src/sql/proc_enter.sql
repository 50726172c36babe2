-- locksmith_enter_v4: a waiting step or a try (p_try = 1) of entry p_id on lock p_segment in one
-- call. A mutex's request (p_row = 1) on a lock with no live holder and nothing queued holds in
-- the lock's row (table_locks.sql): one autocommit `UPDATE`, the token its LAST_INSERT_ID;
-- outcome 4. Otherwise, in a transaction of its own, the holder kept in the row (if any) moves
-- into the queue first (move_holder.sql), and the call decides the queues it can decide alone:
-- those with no expired entry, no observer and only exclusive entries (mutexes, writers,
-- candidates), or empty (any kind). Answers one row (outcome, token, left_us): outcome 1
-- granted with `token` (4: held in the row); 2 waiting, `left_us` the time left on the lease of
-- the holder just ahead (NULL: the entry ahead waits too); 3 busy (a try that would wait;
-- nothing added); 0 the queue is another case and nothing was changed: the caller runs the full
-- step (protocol/queue.rs), which decides with locksmith-core's queue rule. In the cases decided
-- here that rule says: the first exclusive entry holds, each one after it waits for the one
-- ahead; a new entry holds on an empty queue.
-- The version is in the name: a new definition takes a new name (conn/routines.rs).
CREATE PROCEDURE locksmith_enter_v4(
    IN p_segment VARBINARY(3072), IN p_id BIGINT UNSIGNED, IN p_owner BIGINT UNSIGNED,
    IN p_role CHAR(1), IN p_permits INT UNSIGNED, IN p_value MEDIUMBLOB,
    IN p_ttl_us BIGINT UNSIGNED, IN p_life_us BIGINT UNSIGNED, IN p_try TINYINT, IN p_row TINYINT)
MODIFIES SQL DATA
body: BEGIN
    DECLARE v_lock BIGINT UNSIGNED DEFAULT NULL;
    DECLARE v_last, v_token BIGINT UNSIGNED DEFAULT 0;
    DECLARE v_seq, v_first BIGINT UNSIGNED DEFAULT NULL;
    DECLARE v_held TINYINT DEFAULT NULL;
    DECLARE v_n, v_other, v_expired, v_watched INT DEFAULT 0;
    DECLARE v_left BIGINT DEFAULT NULL;
    DECLARE v_holder BIGINT UNSIGNED DEFAULT NULL;
    DECLARE v_holder_live TINYINT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    -- A lock's first use finds no row (then made below); no warning for it.
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    IF p_row THEN
        -- Nobody holds it (or the holder's lease ran out) and nothing is queued: it holds in the
        -- row. The row alone decides (`queued`): this statement's reads of other tables would use
        -- a snapshot taken before it waited for the row's lock, and could miss an entry
        -- committed meanwhile. A statement of its own, committed at once (autocommit).
        UPDATE locksmith_locks
            SET token = LAST_INSERT_ID(GREATEST(token + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED))),
                holder = p_id, holder_owner = p_owner, holder_ttl_us = p_ttl_us,
                holder_expires = NOW(6) + INTERVAL p_ttl_us MICROSECOND
            WHERE segment = p_segment AND queued = 0 AND (holder IS NULL OR holder_expires < NOW(6));
        IF ROW_COUNT() > 0 THEN
            SELECT CAST(4 AS SIGNED) AS outcome, CAST(LAST_INSERT_ID() AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
            LEAVE body;
        END IF;
    END IF;
    START TRANSACTION;
    -- Every statement counts (each is some 30 µs of the server's time): the lock's row is read
    -- with its token under its row lock, and the queue summed up in one pass.
    SELECT lock_id, token, holder, holder_expires >= NOW(6) INTO v_lock, v_last, v_holder, v_holder_live
        FROM locksmith_locks WHERE segment = p_segment FOR UPDATE;
    IF v_lock IS NULL THEN
        -- Its first use (or its first since a prune): the counter starts at the high-water mark
        -- of pruned tokens (sql/lock_row.sql).
        INSERT INTO locksmith_locks (segment, token, queued)
            SELECT p_segment, COALESCE(MAX(m.token), 0), 1 FROM locksmith_locks m WHERE m.segment = '~pruned'
            ON DUPLICATE KEY UPDATE locksmith_locks.queued = locksmith_locks.queued;
        SELECT lock_id, token, holder, holder_expires >= NOW(6) INTO v_lock, v_last, v_holder, v_holder_live
            FROM locksmith_locks WHERE segment = p_segment FOR UPDATE;
    END IF;
    IF v_holder = p_id AND v_holder_live THEN
        -- This call run again after its answer was lost with its connection, the first run's
        -- grant in the row: held, its lease starting again now (the caller counts it from this
        -- call's sending), the token the row's.
        UPDATE locksmith_locks SET holder_expires = NOW(6) + INTERVAL holder_ttl_us MICROSECOND
            WHERE lock_id = v_lock;
        COMMIT;
        SELECT CAST(4 AS SIGNED) AS outcome, CAST(v_last AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
        LEAVE body;
    END IF;
    IF v_holder IS NOT NULL THEN
        IF p_try AND v_holder_live AND v_holder <> p_id THEN
            -- Held in the row by another: a try answers busy and leaves the holder where it is.
            ROLLBACK;
            SELECT CAST(3 AS SIGNED) AS outcome, CAST(0 AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
            LEAVE body;
        END IF;
        -- The holder kept in the row joins the queue, ahead of everyone (none is queued behind a
        -- holder in the row), with its id, token and lease (sql/move_holder.sql).
        INSERT INTO locksmith_entries (id, lock_id, owner, role, permits, value, ttl_us, held, token, expires_at)
            SELECT holder, lock_id, holder_owner, 'x', 0, '', holder_ttl_us, 1, token, holder_expires
            FROM locksmith_locks WHERE lock_id = v_lock;
        UPDATE locksmith_locks SET holder = NULL, holder_owner = 0, queued = 1 WHERE lock_id = v_lock;
    END IF;
    SELECT COUNT(*), COALESCE(SUM(role <> 'x'), 0), COALESCE(SUM(expires_at < NOW(6)), 0),
           MIN(seq), MAX(IF(id = p_id, seq, NULL)), MAX(IF(id = p_id, held, NULL)),
           MAX(IF(id = p_id, token, NULL)),
           EXISTS(SELECT 1 FROM locksmith_watches WHERE lock_id = v_lock)
        INTO v_n, v_other, v_expired, v_first, v_seq, v_held, v_token, v_watched
        FROM locksmith_entries WHERE lock_id = v_lock;
    IF v_expired > 0 OR v_watched OR v_other > 0 OR (v_n > 0 AND p_role <> 'x')
        OR (v_seq IS NOT NULL AND p_try) THEN
        ROLLBACK;
        SELECT CAST(0 AS SIGNED) AS outcome, CAST(0 AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
    ELSEIF v_seq IS NULL AND v_n = 0 THEN
        -- An empty queue: the new entry holds. The token: GREATEST(counter + 1, clock in µs).
        -- A mutex's holds in the row, and the row says the queue is empty again.
        SET v_token = GREATEST(v_last + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED));
        IF p_row THEN
            UPDATE locksmith_locks
                SET token = v_token, holder = p_id, holder_owner = p_owner, holder_ttl_us = p_ttl_us,
                    holder_expires = NOW(6) + INTERVAL p_ttl_us MICROSECOND, queued = 0
                WHERE lock_id = v_lock;
        ELSE
            UPDATE locksmith_locks SET token = v_token, queued = 1 WHERE lock_id = v_lock;
            INSERT INTO locksmith_entries (id, lock_id, owner, role, permits, value, ttl_us, held, token, expires_at)
                VALUES (p_id, v_lock, p_owner, p_role, p_permits, p_value, p_ttl_us, 1, v_token,
                        NOW(6) + INTERVAL p_ttl_us MICROSECOND);
        END IF;
        COMMIT;
        SELECT CAST(IF(p_row, 4, 1) AS SIGNED) AS outcome, CAST(v_token AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
    ELSEIF v_seq IS NULL AND p_try THEN
        ROLLBACK;
        SELECT CAST(3 AS SIGNED) AS outcome, CAST(0 AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
    ELSEIF v_seq IS NULL THEN
        -- It joins behind the last entry, and waits for it.
        SELECT IF(held, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at), NULL) INTO v_left
            FROM locksmith_entries WHERE lock_id = v_lock ORDER BY seq DESC LIMIT 1;
        INSERT INTO locksmith_entries (id, lock_id, owner, role, permits, value, ttl_us, held, token, expires_at)
            VALUES (p_id, v_lock, p_owner, p_role, p_permits, p_value, p_ttl_us, 0, 0,
                    NOW(6) + INTERVAL p_life_us MICROSECOND);
        COMMIT;
        SELECT CAST(2 AS SIGNED) AS outcome, CAST(0 AS UNSIGNED) AS token, CAST(v_left AS SIGNED) AS left_us;
    ELSEIF v_seq = v_first THEN
        -- Its entry is first: it holds, its lease counting from now. Already held, this is the
        -- call run again after its answer was lost with its connection: the lease then starts
        -- again now too, since the caller counts it from when it sent this call, later than the
        -- first call's grant.
        IF v_held = 0 THEN
            SET v_token = GREATEST(v_last + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED));
            UPDATE locksmith_locks SET token = v_token WHERE lock_id = v_lock;
            UPDATE locksmith_entries
                SET held = 1, token = v_token, expires_at = NOW(6) + INTERVAL ttl_us MICROSECOND
                WHERE id = p_id;
        ELSE
            UPDATE locksmith_entries SET expires_at = NOW(6) + INTERVAL ttl_us MICROSECOND WHERE id = p_id;
        END IF;
        COMMIT;
        SELECT CAST(1 AS SIGNED) AS outcome, CAST(v_token AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
    ELSE
        -- It waits for the entry just ahead of it.
        SELECT IF(held, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at), NULL) INTO v_left
            FROM locksmith_entries WHERE lock_id = v_lock AND seq < v_seq ORDER BY seq DESC LIMIT 1;
        COMMIT;
        SELECT CAST(2 AS SIGNED) AS outcome, CAST(0 AS UNSIGNED) AS token, CAST(v_left AS SIGNED) AS left_us;
    END IF;
END
