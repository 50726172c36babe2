-- The queue: a row per holder or waiter. `expires_at` is in no index, so a renewal or a beat
-- rewrites it in place, and an entry's insert and delete touch three indexes, not four (an
-- `expiry (lock_id, expires_at)` index made an uncontended cycle some 10% slower in lockbench;
-- the expiry checks read one lock's entries through `queue`, as every step reads its queue).
CREATE TABLE IF NOT EXISTS locksmith_entries (
    seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id BIGINT UNSIGNED NOT NULL,
    lock_id BIGINT UNSIGNED NOT NULL,
    owner BIGINT UNSIGNED NOT NULL,
    role CHAR(1) NOT NULL,
    permits INT UNSIGNED NOT NULL DEFAULT 0,
    value MEDIUMBLOB NOT NULL,
    ttl_us BIGINT UNSIGNED NOT NULL,
    held TINYINT NOT NULL DEFAULT 0,
    token BIGINT UNSIGNED NOT NULL DEFAULT 0,
    expires_at DATETIME(6) NOT NULL,
    UNIQUE KEY id (id),
    KEY queue (lock_id, seq),
    KEY owner (owner, held)
) ENGINE = InnoDB
