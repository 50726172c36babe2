SELECT conn_id FROM locksmith_owners WHERE id = ?
