SET SESSION wait_timeout = ?
