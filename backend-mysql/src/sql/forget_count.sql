SELECT COUNT(*) FROM locksmith_owners WHERE seen_at < NOW(6) - INTERVAL 1 HOUR
