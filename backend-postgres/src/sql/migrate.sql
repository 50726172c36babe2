-- Migrates the tables of version 1 to version 2 (adds the functions of alone.sql). Run by a
-- locker that finds version 1 (it needs the rights that created the tables: their owner, or
-- `locksmith init` run as the owner), in one transaction under the same advisory lock as
-- schema.sql, so that lockers starting together migrate once.
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('locksmith schema ' || {schema_literal}));
{alone}
UPDATE {schema}.meta SET value = '2' WHERE key = 'version' AND value = '1';
COMMIT;
