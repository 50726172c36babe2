-- A row per lock name (and family): its fencing counter `token`, and the holder of a lock that
-- nobody else wanted (`holder`, its locker `holder_owner`, TTL and lease; its token is the
-- row's): an uncontended cycle updates this row twice instead of inserting and deleting an
-- entry (sql/proc_enter.sql). `queued` says whether entries may be queued: set by every step
-- that may add one, cleared when a call finds the queue empty (true is always safe). Only
-- `holder_owner` is indexed (renewals and a locker's close find its holders by it); a holder
-- that leaves the row sets it back to 0, so that a locker's renewals scan and lock the rows it
-- holds in now and no other (a row still naming an earlier holder may be locked by another
-- client's transaction for as long as that one stalls).
CREATE TABLE IF NOT EXISTS locksmith_locks (
    lock_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    segment VARBINARY(3072) NOT NULL,
    token BIGINT UNSIGNED NOT NULL DEFAULT 0,
    queued TINYINT NOT NULL DEFAULT 1,
    holder BIGINT UNSIGNED NULL,
    holder_owner BIGINT UNSIGNED NOT NULL DEFAULT 0,
    holder_ttl_us BIGINT UNSIGNED NOT NULL DEFAULT 0,
    holder_expires DATETIME(6) NULL,
    UNIQUE KEY segment (segment),
    KEY holder_owner (holder_owner)
) ENGINE = InnoDB
