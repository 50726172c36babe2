-- Migrates the tables of version 1 to 6 to version 7: adds the functions of alone.sql (version
-- 1 had none, version 4's gave tokens without the clock's floor, version 5's notified a grant
-- without its fencing token, version 6's kept no holder in the lock's row; CREATE OR REPLACE),
-- the data table of data.sql (versions 1 and 2 had none), locks.since (versions 1 to 3 had none;
-- 0 is where every queue starts) and the lock row's holder and `queued` (versions 1 to 6 had
-- none; true, as the row of a lock with entries must be, until a step looks), drops version 6's
-- grant_alone, and renames locks.last_token to token. The rename is what stops a locker of an older release that
-- is still running: its statements name last_token and fail from then on, instead of stepping on
-- a queue without the holder kept in the row (which it would not see). Run by a locker that finds
-- version 1 to 6 (it needs the rights that created the tables: their owner, or `locksmith init`
-- run as the owner), in one transaction under the same advisory lock as schema.sql, so that
-- lockers starting together migrate once; each statement may run again on migrated tables.
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('locksmith schema ' || {schema_literal}));
ALTER TABLE {schema}.locks ADD COLUMN IF NOT EXISTS since bigint NOT NULL DEFAULT 0;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = {schema_literal} AND table_name = 'locks' AND column_name = 'last_token') THEN
        ALTER TABLE {schema}.locks RENAME COLUMN last_token TO token;
    END IF;
END $$;
ALTER TABLE {schema}.locks
    ADD COLUMN IF NOT EXISTS queued boolean NOT NULL DEFAULT true,
    ADD COLUMN IF NOT EXISTS holder text,
    ADD COLUMN IF NOT EXISTS holder_owner text,
    ADD COLUMN IF NOT EXISTS holder_ttl_ms bigint,
    ADD COLUMN IF NOT EXISTS holder_expires timestamptz,
    ADD COLUMN IF NOT EXISTS holder_pid integer,
    ADD COLUMN IF NOT EXISTS holder_host text;
-- Version 6's one-statement grant added an entry; grants in the row are a plain statement now.
DROP FUNCTION IF EXISTS {schema}.grant_alone(text, text, text, bigint, integer, text);
{alone}
{data}
-- The room for renewals that schema.sql gives these tables (new pages only; rows move there as
-- they are rewritten).
ALTER TABLE {schema}.locks SET (fillfactor = 50);
ALTER TABLE {schema}.owners SET (fillfactor = 50);
ALTER TABLE {schema}.entries SET (fillfactor = 50);
-- The high-water mark of pruned tokens (schema.sql), for prunes to come.
INSERT INTO {schema}.locks (segment, token, queued) VALUES ('{pruned}', 0, false) ON CONFLICT (segment) DO NOTHING;
UPDATE {schema}.meta SET value = '7' WHERE key = 'version' AND value IN ('1', '2', '3', '4', '5', '6');
COMMIT;
