-- The row '~pruned-at' (no lock's segment: those are `[A-Za-z0-9_%-]` and a family suffix), made
-- if missing: its token is when the last automatic pass of pruning began, in µs of the server's
-- clock (prune_claim.sql). 0: never.
INSERT IGNORE INTO locksmith_locks (segment, token) VALUES ('~pruned-at', 0)
