SELECT CAST(IS_USED_LOCK(CONCAT('locksmith_wait_', owner)) AS UNSIGNED) FROM locksmith_watches WHERE lock_id = ?
