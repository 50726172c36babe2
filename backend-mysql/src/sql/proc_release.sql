-- locksmith_release_v5: releases holder p_id of lock p_segment (with fencing token p_token) in one
-- call. A mutex's lease (p_row = 1, as its enter call's) may be held in the lock's row
-- (proc_enter.sql): it is freed there first with one autocommit `UPDATE`, as it was granted, and
-- the call answers at once; an uncontended cycle then runs no transaction at all (v4 locked and
-- read the row in one first: three statements more, ~60 µs of the server's time a cycle). When
-- that finds nothing (the lease is a queue entry, or a waiter moved it there: a hand-over), the
-- call goes on in a transaction of its own. The lock's row is locked and read first: a holder
-- kept there is freed with one `UPDATE` (the lease's token and life checked: `released` 0 if
-- it ran out). Otherwise the entry is released when the queue is one it can decide alone: no
-- expired entry, no observer, and every other entry an exclusive waiter. The first of those then
-- holds by the queue rule, and is granted here: its token (the counter's next, as every grant's),
-- its lease from now, and a mailbox row; its locker's wait task reads the grant with the row
-- (sql/wakes_read.sql) and the waiter holds without a statement of its own (protocol/wait.rs).
-- After the commit its locker's wait
-- connection is sent `KILL QUERY` (wake.rs; an error there is ignored: the locker finds the row
-- at its next beat) if the registered id is that connection's: it holds its mark (layout.rs,
-- mark_prefix), or, for a locker of an older release (no mark), the process list shows it
-- running its wait statement (sql/waiting_conns.sql's test). After a server restart an id
-- registered before it may be another client's connection. (v2 read the process list for every
-- wake-up: 0.5-2 ms of the server's time, most of a hand-over.)
-- Answers one row (outcome, released): outcome 1 done, `released` 1 if the entry was released,
-- 0 if it was not held (gone, expired, or another token); outcome 0 when the queue is another
-- case and nothing was changed: the caller runs the full step (protocol/queue.rs).
-- The version is in the name: a new definition takes a new name (conn/routines.rs).
CREATE PROCEDURE locksmith_release_v5(
    IN p_segment VARBINARY(3072), IN p_id BIGINT UNSIGNED, IN p_token BIGINT UNSIGNED, IN p_row TINYINT)
MODIFIES SQL DATA
body: BEGIN
    DECLARE v_lock BIGINT UNSIGNED DEFAULT NULL;
    DECLARE v_last, v_token BIGINT UNSIGNED DEFAULT 0;
    DECLARE v_next, v_owner, v_conn, v_holder BIGINT UNSIGNED DEFAULT NULL;
    DECLARE v_n, v_other, v_expired, v_watched, v_released INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    IF p_row THEN
        -- Held in the row, by this token, and live: freed, the statement committed at once.
        UPDATE locksmith_locks SET holder = NULL, holder_owner = 0
            WHERE segment = p_segment AND holder = p_id AND token = p_token AND holder_expires >= NOW(6);
        IF ROW_COUNT() > 0 THEN
            SELECT CAST(1 AS SIGNED) AS outcome, CAST(1 AS SIGNED) AS released;
            LEAVE body;
        END IF;
    END IF;
    START TRANSACTION;
    SELECT lock_id, token, holder INTO v_lock, v_last, v_holder FROM locksmith_locks WHERE segment = p_segment FOR UPDATE;
    IF v_holder = p_id THEN
        -- Held in the row: freed, if still its lease (by its token, and live).
        UPDATE locksmith_locks SET holder = NULL, holder_owner = 0
            WHERE lock_id = v_lock AND token = p_token AND holder_expires >= NOW(6);
        SET v_released = ROW_COUNT();
        COMMIT;
        SELECT CAST(1 AS SIGNED) AS outcome, CAST(v_released AS SIGNED) AS released;
        LEAVE body;
    END IF;
    SELECT COALESCE(SUM(id <> p_id), 0), COALESCE(SUM(id <> p_id AND (role <> 'x' OR held <> 0)), 0),
           COALESCE(SUM(expires_at < NOW(6)), 0),
           EXISTS(SELECT 1 FROM locksmith_watches WHERE lock_id = v_lock)
        INTO v_n, v_other, v_expired, v_watched
        FROM locksmith_entries WHERE lock_id = v_lock;
    IF v_lock IS NULL OR v_expired > 0 OR v_watched OR v_other > 0 THEN
        ROLLBACK;
        SELECT CAST(0 AS SIGNED) AS outcome, CAST(0 AS SIGNED) AS released;
    ELSE
        DELETE FROM locksmith_entries WHERE id = p_id AND held = 1 AND token = p_token;
        SET v_released = ROW_COUNT();
        IF v_released > 0 AND v_n > 0 THEN
            -- The first waiter holds now: its grant, its mailbox row, and its locker's wait
            -- connection.
            SELECT e.id, e.owner, o.conn_id INTO v_next, v_owner, v_conn
                FROM locksmith_entries e LEFT JOIN locksmith_owners o ON o.id = e.owner
                WHERE e.lock_id = v_lock ORDER BY e.seq LIMIT 1;
            SET v_token = GREATEST(v_last + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED));
            UPDATE locksmith_locks SET token = v_token WHERE lock_id = v_lock;
            UPDATE locksmith_entries
                SET held = 1, token = v_token, expires_at = NOW(6) + INTERVAL ttl_us MICROSECOND
                WHERE id = v_next;
            INSERT INTO locksmith_wakes (owner, entry, lock_id) VALUES (v_owner, v_next, v_lock);
        ELSEIF v_released > 0 THEN
            -- The queue is empty: the next mutex request may hold in the row again.
            UPDATE locksmith_locks SET queued = 0 WHERE lock_id = v_lock;
        END IF;
        COMMIT;
        IF v_conn IS NOT NULL AND (
            IS_USED_LOCK(CONCAT('locksmith-mark-', LPAD(LOWER(HEX(v_owner)), 16, '0'), '-', v_conn)) <=> v_conn
            OR EXISTS(SELECT 1 FROM information_schema.PROCESSLIST
                      WHERE ID = v_conn AND INFO LIKE '%locksmith wait%')) THEN
            BEGIN
                DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
                KILL QUERY v_conn;
            END;
        END IF;
        SELECT CAST(1 AS SIGNED) AS outcome, CAST(v_released AS SIGNED) AS released;
    END IF;
END
