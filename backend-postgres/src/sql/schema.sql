-- The schema of locksmith-postgres, version 7 (version 1 had no functions, version 2 no data table,
-- version 3 no locks.since, version 4 tokens without the clock's floor, version 5 grants notified
-- without their tokens, version 6 no holder in the lock's row and the counter named last_token:
-- migrate.sql). The schema's name is filled in, quoted, where the statements name it.
-- Run in one transaction under an advisory lock, so that lockers starting together do not race
-- on CREATE ... IF NOT EXISTS.
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('locksmith schema ' || {schema_literal}));
CREATE SCHEMA IF NOT EXISTS {schema};
-- 'version': the format of these tables; a later release migrates from it.
CREATE TABLE IF NOT EXISTS {schema}.meta (key text PRIMARY KEY, value text NOT NULL);
INSERT INTO {schema}.meta (key, value) VALUES ('version', '7') ON CONFLICT (key) DO NOTHING;
-- One row per lock in use: its row lock serialises the steps on the lock, and token, the last
-- fencing token handed out, keeps tokens increasing. A row idle for long (nobody holds or waits,
-- no token handed out for the idle time) is removed by a prune (idle_locks.sql), which keeps the
-- largest token it removed in the row '{pruned}' (no lock's segment has a '~'), the high-water
-- mark that a lock's next row starts from: its tokens go on above every earlier one.
-- In that row, holder_expires is when the schema's last automatic prune began (idle_claim.sql).
-- since: every entry of the lock has seq >= since (a lower bound, moved forward only under the
-- row lock). The reads of a queue start there: the index entries of deleted entries stay in
-- entries_by_segment until VACUUM removes them, and a lock taken and released thousands of times
-- between two vacuums made every read of its queue walk them all (a step slowed from 0.4 to
-- 0.9 ms in 20,000 cycles).
-- holder and the holder_ columns: the holder of a lock that nobody else wanted, kept in the row
-- itself (layout.rs's grant_in_row; its fencing token is `token`) so that an uncontended acquire
-- and release are one plain update of this row each, as a bare upsert would be, instead of
-- adding and deleting an entry with its three indexes. Every full step first moves such a holder
-- into the entries (lock_row), so that every queue rule, renewal and clean-up reads one queue.
-- None of these columns is indexed, so that the updates stay HOT (fillfactor 50, see owners).
-- queued: false only if the lock has no entry from `since` on, so that grant_in_row can decide
-- on this row alone (a statement's reads of other tables would use a snapshot from before it
-- waited for the row's lock). Set by every step that changes the queue (layout.rs's
-- advance_and_notify), by lock_row when it moves a holder in, and cleared by leave_exclusive when
-- it removes the last entry. Entries are removed without the row's lock only by a locker's
-- shutdown, which leaves it true: true is always safe (the grant takes the full step).
CREATE TABLE IF NOT EXISTS {schema}.locks (
    segment text PRIMARY KEY,
    token bigint NOT NULL DEFAULT 0,
    since bigint NOT NULL DEFAULT 0,
    queued boolean NOT NULL DEFAULT true,
    holder text,
    holder_owner text,
    holder_ttl_ms bigint,
    holder_expires timestamptz,
    holder_pid integer,
    holder_host text
) WITH (fillfactor = 50);
-- One row per live Locker: its waiters live while expires_at (server clock) is ahead.
-- fillfactor 50 (here and on entries): the heartbeats and renewals rewrite expires_at, which no
-- index holds; with room on the page the new row version goes beside the old one (a HOT update:
-- no index entry, and the old version is pruned on the next visit, vacuum or not). Full pages
-- made every renewal a new row and three index entries: 10,000 held leases grew the table by
-- 2 MB a second and slowed their own renewal until the leases were lost (CI, autovacuum off).
CREATE TABLE IF NOT EXISTS {schema}.owners (
    id text PRIMARY KEY,
    expires_at timestamptz NOT NULL,
    pid integer NOT NULL,
    host text NOT NULL
) WITH (fillfactor = 50);
-- Holders (token set) and waiters, in arrival order (seq).
CREATE TABLE IF NOT EXISTS {schema}.entries (
    id text PRIMARY KEY,
    segment text NOT NULL,
    seq bigserial NOT NULL,
    owner text NOT NULL,
    role text NOT NULL,
    value text NOT NULL DEFAULT '',
    ttl_ms bigint NOT NULL,
    token bigint,
    expires_at timestamptz,
    pid integer NOT NULL,
    host text NOT NULL
) WITH (fillfactor = 50);
CREATE INDEX IF NOT EXISTS entries_by_segment ON {schema}.entries (segment, seq);
CREATE INDEX IF NOT EXISTS entries_by_owner ON {schema}.entries (owner);
-- The high-water mark of pruned tokens (above); a locker adds it too where it is missing.
INSERT INTO {schema}.locks (segment, token, queued) VALUES ('{pruned}', 0, false) ON CONFLICT (segment) DO NOTHING;
{data}
{alone}
COMMIT;
