//! Where locks live: the tables of one schema (`src/sql/schema.sql`), lock rows keyed by
//! [`locksmith_core::Family::segment`], and the statements on them with the schema filled in; with
//! `layout=advisory`, also the session advisory lock of the name (`crate::advisory`).

use locksmith_core::driver::LockName;
use locksmith_core::Family;

/// How locks are kept (`layout=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `layout=default`: the tables alone (every kind of lock, private to locksmith).
    Tables,
    /// `layout=advisory`: the tables, and a holder also holds the session advisory lock of its
    /// name (a bigint key), so that programs calling `pg_advisory_lock(key)` share the lock
    /// (`crate::advisory`). Mutexes and read-write locks only.
    Advisory,
}

impl Layout {
    /// The layout of `layout=<text>`.
    pub fn parse(text: &str) -> Option<Layout> {
        match text {
            "default" => Some(Layout::Tables),
            "advisory" => Some(Layout::Advisory),
            _ => None,
        }
    }
}

/// The key of a lock's row: its family's segment of its name.
pub(crate) fn segment(family: Family, name: &LockName) -> String {
    family.segment(name)
}

/// The statements of one schema, built once per locker.
#[derive(Debug)]
pub(crate) struct Sql {
    /// The NOTIFY channel of the schema (payload: a lock's segment).
    pub channel: String,
    /// Creates the tables (`schema.sql`), several statements.
    pub create: String,
    /// Reads the format version.
    pub version: String,
    /// Migrates the tables of version 1 to 5 to version 6 (`migrate.sql`), several statements.
    pub migrate: String,
    /// `alone.sql`'s `grant_alone`: `$1` segment, `$2` id, `$3` owner, `$4` ttl ms, `$5` pid, `$6` host.
    pub grant_alone: String,
    /// `alone.sql`'s `leave_exclusive`: `$1` segment, `$2` id, `$3` the NOTIFY channel.
    pub leave_exclusive: String,
    /// Restarts the lease of entry `$1` if it holds one that is live; returns its token.
    pub confirm: String,
    /// The guarded writes (`guarded.rs`), one statement each: `$1` the holder's entry id, `$2`
    /// its token, `$3` the key, `$4` the value, `$5` the expected value. Each answers (held,
    /// applied). A put.
    pub guarded_put: String,
    /// A guarded delete.
    pub guarded_delete: String,
    /// A guarded compare-and-set of a present key.
    pub guarded_swap: String,
    /// A guarded compare-and-set of an absent key.
    pub guarded_insert: String,
    /// The value of key `$1`.
    pub guarded_read: String,
    /// Inserts the lock's row if missing and locks it; returns `last_token`.
    pub lock_row: String,
    /// `prune.sql`.
    pub prune: String,
    /// `queue.sql`.
    pub queue: String,
    /// `renew.sql`.
    pub renew: String,
    /// Inserts or beats a locker's owner row: `$1` id, `$2` ms, `$3` pid, `$4` host.
    pub beat: String,
    /// Adds an entry: id, segment, owner, role, value, ttl_ms, token (or null), pid, host.
    pub insert: String,
    /// Hands out the next fencing token of a lock.
    pub next_token: String,
    /// Grants entry `$1` token `$2` (its lease counts from now).
    pub grant: String,
    /// Restarts the lease of entry `$1`, granted by another's step, from now.
    pub restart_lease: String,
    /// The locks with waiters of lockers that stopped beating (`sweep.sql`).
    pub sweep: String,
    /// The end of a step that changed lock `$1`'s queue, in one statement: moves its `since`
    /// (schema.sql) up to its first entry, or with none left to `$2` (one past the last entry
    /// the step read; NULL: where it is), never back, and NOTIFYs channel `$3` with payload `$4`.
    /// Run with the lock's row locked.
    pub advance_and_notify: String,
    /// Removes entry `$1`; returns whether it held.
    pub delete: String,
    /// Removes a locker's owner row and entries.
    pub close: String,
    /// `list`: segments in use with their number of entries.
    pub list: String,
    /// Removes the holders of lock `$1`, as an operator would (tests).
    pub delete_holders: String,
}

/// `text` with the schema filled in: `{schema}` quoted, `{schema_literal}` as a string literal
/// (`schema` is an identifier of `[a-z_][a-z0-9_]*`, checked by `config.rs`).
fn fill(schema: &str, text: &str) -> String {
    text.replace("{alone}", include_str!("sql/alone.sql"))
        .replace("{data}", include_str!("sql/data.sql"))
        .replace("{schema_literal}", &format!("'{schema}'"))
        .replace("{schema}", &format!("\"{schema}\""))
}

/// What `locksmith init --sql` prints: the tables of `schema` (`schema.sql`, the statements a
/// locker runs itself on first use) and, for `role`, the grants a locker's user needs then
/// (`grants.sql`).
pub(crate) fn setup_sql(schema: &str, role: Option<&str>) -> String {
    let mut sql = fill(schema, include_str!("sql/schema.sql"));
    if let Some(role) = role {
        let quoted = format!("\"{}\"", role.replace('"', "\"\""));
        sql.push('\n');
        sql.push_str(&fill(schema, include_str!("sql/grants.sql")).replace("{role}", &quoted));
    }
    sql
}

/// A guarded write's statement: `write` (a data-modifying statement that writes only if the CTE
/// `held` has a row) after the check of the holder's entry (`$1` id, `$2` token), live by the
/// server's clock and locked `FOR SHARE`, so that no step removes it before this one commits.
/// Answers (held, applied).
fn guarded(write: &str) -> String {
    format!(
        "WITH held AS (SELECT 1 FROM {{schema}}.entries \
         WHERE id = $1 AND token = $2::bigint AND expires_at > clock_timestamp() FOR SHARE), \
         w AS ({write}) SELECT EXISTS (SELECT 1 FROM held), EXISTS (SELECT 1 FROM w)"
    )
}

impl Sql {
    /// The statements of `schema` (an identifier of `[a-z_][a-z0-9_]*`, checked by `config.rs`).
    pub fn new(schema: &str) -> Sql {
        let fill = |text: &str| fill(schema, text);
        Sql {
            channel: format!("locksmith_{schema}"),
            create: fill(include_str!("sql/schema.sql")),
            version: fill("SELECT value FROM {schema}.meta WHERE key = 'version'"),
            migrate: fill(include_str!("sql/migrate.sql")),
            grant_alone: fill("SELECT {schema}.grant_alone($1, $2, $3, $4::bigint, $5, $6)"),
            leave_exclusive: fill("SELECT {schema}.leave_exclusive($1, $2, $3)"),
            confirm: fill(
                "UPDATE {schema}.entries SET expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond' \
                 WHERE id = $1 AND token IS NOT NULL AND expires_at > clock_timestamp() RETURNING token",
            ),
            guarded_put: fill(&guarded(
                "INSERT INTO {schema}.data (key, value) SELECT $3, $4::bytea FROM held \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value RETURNING 1",
            )),
            guarded_delete: fill(&guarded(
                "DELETE FROM {schema}.data WHERE key = $3 AND EXISTS (SELECT 1 FROM held) RETURNING 1",
            )),
            guarded_swap: fill(&guarded(
                "UPDATE {schema}.data SET value = $4::bytea \
                 WHERE key = $3 AND value = $5::bytea AND EXISTS (SELECT 1 FROM held) RETURNING 1",
            )),
            guarded_insert: fill(&guarded(
                "INSERT INTO {schema}.data (key, value) SELECT $3, $4::bytea FROM held \
                 ON CONFLICT (key) DO NOTHING RETURNING 1",
            )),
            guarded_read: fill("SELECT value FROM {schema}.data WHERE key = $1"),
            lock_row: fill(
                "INSERT INTO {schema}.locks (segment) VALUES ($1) ON CONFLICT (segment) \
                 DO UPDATE SET last_token = {schema}.locks.last_token RETURNING last_token",
            ),
            prune: fill(include_str!("sql/prune.sql")),
            queue: fill(include_str!("sql/queue.sql")),
            renew: fill(include_str!("sql/renew.sql")),
            beat: fill(
                "INSERT INTO {schema}.owners (id, expires_at, pid, host) \
                 VALUES ($1, clock_timestamp() + $2::bigint * interval '1 millisecond', $3, $4) \
                 ON CONFLICT (id) DO UPDATE SET expires_at = greatest({schema}.owners.expires_at, excluded.expires_at)",
            ),
            insert: fill(
                "INSERT INTO {schema}.entries (id, segment, owner, role, value, ttl_ms, token, expires_at, pid, host) \
                 VALUES ($1, $2, $3, $4, $5, $6::bigint, $7::bigint, \
                 CASE WHEN $7::bigint IS NULL THEN NULL ELSE clock_timestamp() + $6::bigint * interval '1 millisecond' END, $8, $9)",
            ),
            next_token: fill(
                "UPDATE {schema}.locks SET last_token = {schema}.token_after(last_token) WHERE segment = $1 RETURNING last_token",
            ),
            grant: fill(
                "UPDATE {schema}.entries SET token = $2, \
                 expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond' WHERE id = $1",
            ),
            restart_lease: fill(
                "UPDATE {schema}.entries SET expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond' \
                 WHERE id = $1 AND token IS NOT NULL",
            ),
            sweep: fill(include_str!("sql/sweep.sql")),
            // A data-modifying WITH runs once whether or not the SELECT reads it.
            advance_and_notify: fill(
                "WITH moved AS (UPDATE {schema}.locks l SET since = greatest(l.since, coalesce( \
                 (SELECT min(e.seq) FROM {schema}.entries e WHERE e.segment = $1 AND e.seq >= l.since), \
                 $2::bigint, l.since)) WHERE l.segment = $1) \
                 SELECT pg_notify($3, $4)",
            ),
            delete: fill("DELETE FROM {schema}.entries WHERE id = $1 RETURNING token IS NOT NULL"),
            close: fill(
                "WITH gone AS (DELETE FROM {schema}.entries WHERE owner = $1 RETURNING segment) \
                 , o AS (DELETE FROM {schema}.owners WHERE id = $1) \
                 SELECT DISTINCT segment FROM gone",
            ),
            list: fill(include_str!("sql/list.sql")),
            delete_holders: fill("DELETE FROM {schema}.entries WHERE segment = $1 AND token IS NOT NULL"),
        }
    }
}
