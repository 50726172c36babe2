-- Migrates the tables of version 1 or 2 to version 3: adds the functions of alone.sql (version
-- 1 had none; CREATE OR REPLACE) and the data table of data.sql (versions 1 and 2 had none). Run
-- by a locker that finds version 1 or 2 (it needs the rights that created the tables: their
-- owner, or `locksmith init` run as the owner), in one transaction under the same advisory lock
-- as schema.sql, so that lockers starting together migrate once.
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('locksmith schema ' || {schema_literal}));
{alone}
{data}
-- The room for renewals that schema.sql gives these tables (new pages only; rows move there as
-- they are rewritten).
ALTER TABLE {schema}.owners SET (fillfactor = 50);
ALTER TABLE {schema}.entries SET (fillfactor = 50);
UPDATE {schema}.meta SET value = '3' WHERE key = 'version' AND value IN ('1', '2');
COMMIT;
