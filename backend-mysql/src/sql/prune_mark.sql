-- The high-water mark of pruned tokens (the row '~pruned', no lock's segment: those are
-- `[A-Za-z0-9_%-]` and a family suffix), made if missing and locked for the prune's transaction.
INSERT INTO locksmith_locks (segment, token) VALUES ('~pruned', 0)
ON DUPLICATE KEY UPDATE token = token
