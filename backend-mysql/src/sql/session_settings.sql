SET SESSION time_zone = '+00:00', SESSION transaction_isolation = 'READ-COMMITTED', SESSION innodb_lock_wait_timeout = ?
