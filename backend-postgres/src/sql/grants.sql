-- The rights a locker's database user needs once the tables exist (`locksmith init --sql`
-- prints them for a role, with the schema and the role filled in, quoted). Nothing else:
-- no CREATE on the database or the schema, no superuser, no ownership of the tables.
GRANT USAGE ON SCHEMA {schema} TO {role};
-- The format version, read at connect.
GRANT SELECT ON {schema}.meta TO {role};
-- Lock rows: inserted on first use, token moved forward, holder kept; deleted once idle (a
-- prune: idle_locks.sql).
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.locks TO {role};
-- Owner rows and queue entries: added, beaten, removed.
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.owners, {schema}.entries TO {role};
GRANT USAGE ON SEQUENCE {schema}.entries_seq_seq TO {role};
-- Guarded writes' store (data.sql): read, written, deleted.
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.data TO {role};
-- The one-statement hand-over, the tokens, a step's lock of the row and the renewals
-- (alone.sql); EXECUTE is PUBLIC's by default, unless a DBA revoked it.
GRANT EXECUTE ON FUNCTION {schema}.leave_exclusive(text, text, text), {schema}.token_after(bigint),
    {schema}.lock_row(text), {schema}.renew_leases(text, text[], text[]) TO {role};
