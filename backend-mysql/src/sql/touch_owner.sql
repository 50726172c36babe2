UPDATE locksmith_owners SET seen_at = NOW(6) WHERE id = ?
