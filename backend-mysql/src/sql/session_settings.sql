SET SESSION time_zone = '+00:00', SESSION innodb_lock_wait_timeout = ?
