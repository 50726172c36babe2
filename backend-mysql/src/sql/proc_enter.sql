-- locksmith_enter_v2: a waiting step or a try (p_try = 1) of entry p_id on lock p_segment in one
-- call, in a transaction of its own, for the queues it can decide alone: those with no expired
-- entry, no observer and only exclusive entries (mutexes, writers, candidates), or empty (any
-- kind). Answers one row (outcome, token, left_us): outcome 1 granted with `token`; 2 waiting,
-- `left_us` the time left on the lease of the holder just ahead (NULL: the entry ahead waits
-- too); 3 busy (a try that would wait; nothing added); 0 the queue is another case and nothing
-- was changed: the caller runs the full step (protocol/queue.rs), which decides with
-- locksmith-core's queue rule. In the cases decided here that rule says: the first exclusive
-- entry holds, each one after it waits for the one ahead; a new entry holds on an empty queue.
-- The version is in the name: a new definition takes a new name (conn/routines.rs).
CREATE PROCEDURE locksmith_enter_v2(
    IN p_segment VARBINARY(3072), IN p_id BIGINT UNSIGNED, IN p_owner BIGINT UNSIGNED,
    IN p_role CHAR(1), IN p_permits INT UNSIGNED, IN p_value MEDIUMBLOB,
    IN p_ttl_us BIGINT UNSIGNED, IN p_life_us BIGINT UNSIGNED, IN p_try TINYINT)
MODIFIES SQL DATA
BEGIN
    DECLARE v_lock BIGINT UNSIGNED DEFAULT NULL;
    DECLARE v_token BIGINT UNSIGNED DEFAULT 0;
    DECLARE v_seq BIGINT UNSIGNED DEFAULT NULL;
    DECLARE v_held TINYINT DEFAULT 0;
    DECLARE v_n, v_other, v_expired, v_watched INT DEFAULT 0;
    DECLARE v_left BIGINT DEFAULT NULL;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    INSERT INTO locksmith_locks (segment) VALUES (p_segment) ON DUPLICATE KEY UPDATE token = token;
    SELECT lock_id INTO v_lock FROM locksmith_locks WHERE segment = p_segment FOR UPDATE;
    SELECT COUNT(*), COALESCE(SUM(role <> 'x'), 0), COALESCE(SUM(expires_at < NOW(6)), 0)
        INTO v_n, v_other, v_expired
        FROM locksmith_entries WHERE lock_id = v_lock;
    SET v_watched = EXISTS(SELECT 1 FROM locksmith_watches WHERE lock_id = v_lock);
    SET v_seq = (SELECT seq FROM locksmith_entries WHERE id = p_id AND lock_id = v_lock);
    IF v_expired > 0 OR v_watched OR v_other > 0 OR (v_n > 0 AND p_role <> 'x')
        OR (v_seq IS NOT NULL AND p_try) THEN
        ROLLBACK;
        SELECT CAST(0 AS SIGNED) AS outcome, CAST(0 AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
    ELSEIF v_seq IS NULL AND v_n = 0 THEN
        UPDATE locksmith_locks
            SET token = GREATEST(token + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED))
            WHERE lock_id = v_lock;
        SET v_token = (SELECT token FROM locksmith_locks WHERE lock_id = v_lock);
        INSERT INTO locksmith_entries (id, lock_id, owner, role, permits, value, ttl_us, held, token, expires_at)
            VALUES (p_id, v_lock, p_owner, p_role, p_permits, p_value, p_ttl_us, 1, v_token,
                    NOW(6) + INTERVAL p_ttl_us MICROSECOND);
        COMMIT;
        SELECT CAST(1 AS SIGNED) AS outcome, CAST(v_token AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
    ELSEIF v_seq IS NULL AND p_try THEN
        ROLLBACK;
        SELECT CAST(3 AS SIGNED) AS outcome, CAST(0 AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
    ELSEIF v_seq IS NULL THEN
        SELECT IF(held, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at), NULL) INTO v_left
            FROM locksmith_entries WHERE lock_id = v_lock ORDER BY seq DESC LIMIT 1;
        INSERT INTO locksmith_entries (id, lock_id, owner, role, permits, value, ttl_us, held, token, expires_at)
            VALUES (p_id, v_lock, p_owner, p_role, p_permits, p_value, p_ttl_us, 0, 0,
                    NOW(6) + INTERVAL p_life_us MICROSECOND);
        COMMIT;
        SELECT CAST(2 AS SIGNED) AS outcome, CAST(0 AS UNSIGNED) AS token, CAST(v_left AS SIGNED) AS left_us;
    ELSEIF NOT EXISTS(SELECT 1 FROM locksmith_entries WHERE lock_id = v_lock AND seq < v_seq) THEN
        SELECT held, token INTO v_held, v_token FROM locksmith_entries WHERE id = p_id;
        IF v_held = 0 THEN
            UPDATE locksmith_locks
                SET token = GREATEST(token + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED))
                WHERE lock_id = v_lock;
            SET v_token = (SELECT token FROM locksmith_locks WHERE lock_id = v_lock);
            UPDATE locksmith_entries
                SET held = 1, token = v_token, expires_at = NOW(6) + INTERVAL ttl_us MICROSECOND
                WHERE id = p_id;
        END IF;
        COMMIT;
        SELECT CAST(1 AS SIGNED) AS outcome, CAST(v_token AS UNSIGNED) AS token, CAST(NULL AS SIGNED) AS left_us;
    ELSE
        SELECT IF(held, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at), NULL) INTO v_left
            FROM locksmith_entries WHERE lock_id = v_lock AND seq < v_seq ORDER BY seq DESC LIMIT 1;
        COMMIT;
        SELECT CAST(2 AS SIGNED) AS outcome, CAST(0 AS UNSIGNED) AS token, CAST(v_left AS SIGNED) AS left_us;
    END IF;
END
