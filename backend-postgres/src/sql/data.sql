-- The store of guarded writes (LockGuard::guarded, guarded.rs): one row per key. A write
-- commits only in a statement that finds its holder's entry live (and locks it FOR SHARE).
CREATE TABLE IF NOT EXISTS {schema}.data (key text PRIMARY KEY, value bytea NOT NULL);
