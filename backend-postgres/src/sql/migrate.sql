-- Migrates the tables of version 1 to 5 to version 6: adds the functions of alone.sql (version
-- 1 had none, version 4's gave tokens without the clock's floor, version 5's notified a grant
-- without its fencing token; CREATE OR REPLACE), the data
-- table of data.sql (versions 1 and 2 had none) and locks.since (versions 1 to 3 had none; 0 is
-- where every queue starts). Run by a locker that finds version 1 to 5 (it needs the rights that created the tables: their
-- owner, or `locksmith init` run as the owner), in one transaction under the same advisory lock
-- as schema.sql, so that lockers starting together migrate once.
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('locksmith schema ' || {schema_literal}));
ALTER TABLE {schema}.locks ADD COLUMN IF NOT EXISTS since bigint NOT NULL DEFAULT 0;
{alone}
{data}
-- The room for renewals that schema.sql gives these tables (new pages only; rows move there as
-- they are rewritten).
ALTER TABLE {schema}.owners SET (fillfactor = 50);
ALTER TABLE {schema}.entries SET (fillfactor = 50);
UPDATE {schema}.meta SET value = '6' WHERE key = 'version' AND value IN ('1', '2', '3', '4', '5');
COMMIT;
