SET SESSION idle_transaction_timeout = ?
