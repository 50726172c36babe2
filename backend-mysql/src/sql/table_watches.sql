CREATE TABLE IF NOT EXISTS locksmith_watches (
    lock_id BIGINT UNSIGNED NOT NULL,
    owner BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (lock_id, owner),
    KEY owner (owner)
) ENGINE = InnoDB
