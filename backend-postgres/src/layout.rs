//! Where locks live: the tables of one schema (`src/sql/schema.sql`), lock rows keyed by
//! [`locksmith_core::Family::segment`], and the statements on them with the schema filled in; with
//! `layout=advisory`, also the session advisory lock of the name (`crate::advisory`).

use locksmith_core::driver::LockName;
use locksmith_core::{Family, LockError, Result};

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

/// The segment of the row in `locks` that is no lock: the high-water mark of the fencing tokens
/// of the lock rows a prune removed (`sql/idle_locks.sql`), which a lock's next row starts from
/// (see [`Sql::grant_in_row`], [`Sql::next_token`]). No lock's segment has a `~`
/// ([`LockName::encoded`] is `[A-Za-z0-9_-]` and `%XX`, its family's suffix `.` and letters).
pub(crate) const PRUNED: &str = "~pruned";

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
    /// Migrates the tables of version 1 to 6 to version 7 (`migrate.sql`), several statements.
    pub migrate: String,
    /// Grants lock `$1` to `$2` in its row (schema.sql) if nobody holds it there and no entry is
    /// queued: one upsert that decides on the row alone, as the raw floor's does. Its token, or
    /// no row (or NULL). `$3` owner, `$4` ttl ms, `$5` pid, `$6` host.
    ///
    /// A lock without a row (never used, or pruned: `sql/idle_locks.sql`) gets a row whose first
    /// token is above the high-water mark of pruned tokens ([`PRUNED`]), read `FOR SHARE` (the
    /// latest mark, and no prune can remove a row until the statement ends). When the statement
    /// began with a row there that was gone by the time it inserted (a prune removed it
    /// meanwhile), or there is no mark row yet, the row is inserted without a holder and token 0
    /// instead, answering NULL: the full step then grants, its token read after it locked the
    /// row ([`Sql::next_token`]). A row of token 0 is never granted here for the same reason.
    pub grant_in_row: String,
    /// `grant_in_row` for a `try_acquire`, whose answer is final only when the lock is held:
    /// also answers whether the row, as the statement found it, was not `queued` (the lock was
    /// then free, or held by a holder kept in the row) and no holder's lease there ended further
    /// ahead than its TTL (a clock stepped back); else the full step must decide.
    pub try_in_row: String,
    /// `$2` leaves lock `$1`: freed from the lock's row in one `UPDATE` if it is kept there and
    /// live, else `alone.sql`'s `leave_exclusive` (`$3` its NOTIFY channel), which only then
    /// runs (a `CASE` evaluates one branch). True, or NULL: take the full step.
    pub leave: String,
    /// Restarts the lease of entry `$1` if it holds one that is live; returns its token.
    pub confirm: String,
    /// The guarded writes (`guarded.rs`), one statement each: `$1` the holder's entry id, `$2`
    /// its token, `$3` its lock's segment, `$4` the key, `$5` the value, `$6` the expected value.
    /// Each answers (held, applied). A put.
    pub guarded_put: String,
    /// A guarded delete.
    pub guarded_delete: String,
    /// A guarded compare-and-set of a present key.
    pub guarded_swap: String,
    /// A guarded compare-and-set of an absent key.
    pub guarded_insert: String,
    /// The value of key `$1`.
    pub guarded_read: String,
    /// `alone.sql`'s `lock_row`: inserts the lock's row if missing, locks it and moves a holder
    /// kept in it into the entries; returns its token.
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
    /// Hands out the next fencing token of a lock: above its row's last one or, for a row that
    /// has handed out none (token 0: new, perhaps after a prune removed the lock's last row),
    /// above the high-water mark of pruned tokens ([`PRUNED`]). Run with the row locked, in a
    /// statement after the one that locked it: every prune that removed an earlier row of the
    /// lock committed before this row was inserted, so this statement reads its mark.
    pub next_token: String,
    /// Grants entry `$1` token `$2` (its lease counts from now); returns its TTL in ms.
    pub grant: String,
    /// Restarts the lease of entry `$1`, granted by another's step, from now.
    pub restart_lease: String,
    /// The locks with waiters of lockers that stopped beating (`sweep.sql`).
    pub sweep: String,
    /// The end of a step that changed lock `$1`'s queue, in one statement: moves its `since`
    /// (schema.sql) up to its first entry, or with none left to `$2` (one past the last entry
    /// the step read; NULL: where it is), never back, sets whether entries are `queued`, and
    /// NOTIFYs channel `$3` with payload `$4`. Run with the lock's row locked.
    pub advance_and_notify: String,
    /// Removes entry `$1`; returns whether it held.
    pub delete: String,
    /// Frees the holders a locker (`$1` its id) kept in lock rows (`$2` their segments, `$3`
    /// their ids): the first statement of its shutdown's transaction ([`Sql::close`] the second).
    pub close_rows: String,
    /// Removes a locker's owner row and entries (`$1` its id); returns the segments of the
    /// entries. Run after [`Sql::close_rows`], in a statement of its own: its snapshot is taken
    /// after every step that held one of those rows committed, so it also finds a holder such a
    /// step moved from the row into the entries meanwhile (the row update skipped it).
    pub close: String,
    /// `list`: segments in use with their number of entries.
    pub list: String,
    /// Removes the holders of lock `$1`, as an operator would (tests); returns how many.
    pub delete_holders: String,
    /// Adds the high-water mark's row ([`PRUNED`]) if missing.
    pub add_pruned: String,
    /// `idle_claim.sql`: claims the schema's next automatic pass if the last began `$1` ms ago
    /// or more (a row when claimed).
    pub idle_claim: String,
    /// `idle_locks.sql`: removes up to `$2` lock rows idle for `$1` ms; how many.
    pub idle_locks: String,
    /// `idle_queued.sql`: up to `$2` locks idle for `$1` ms whose entries are all dead.
    pub idle_queued: String,
    /// `idle_owners.sql`: removes up to `$2` owner rows of lockers dead for `$1` ms; how many.
    pub idle_owners: String,
    /// `idle_count.sql`: how many lock rows and owner rows a prune would remove.
    pub idle_count: String,
}

/// `text` with the schema filled in: `{schema}` quoted, `{schema_literal}` as a string literal
/// (`schema` is an identifier of `[a-z_][a-z0-9_]*`, checked by `config.rs`).
fn fill(schema: &str, text: &str) -> String {
    text.replace("{alone}", include_str!("sql/alone.sql"))
        .replace("{data}", include_str!("sql/data.sql"))
        .replace("{pruned}", PRUNED)
        .replace("{schema_literal}", &format!("'{schema}'"))
        .replace("{schema}", &format!("\"{schema}\""))
}

/// What `locksmith init --sql` prints: the tables of `schema` (`schema.sql`, the statements a
/// locker runs itself on first use) and, for `role`, the grants a locker's user needs then
/// (`grants.sql`).
///
/// # Errors
/// [`LockError::InvalidOption`] for a `role` that [`check_role`] refuses.
pub(crate) fn setup_sql(schema: &str, role: Option<&str>) -> Result<String> {
    let mut sql = fill(schema, include_str!("sql/schema.sql"));
    if let Some(role) = role {
        check_role(role)?;
        let quoted = format!("\"{}\"", role.replace('"', "\"\""));
        sql.push('\n');
        sql.push_str(&fill(schema, include_str!("sql/grants.sql")).replace("{role}", &quoted));
    }
    Ok(sql)
}

/// The longest name PostgreSQL keeps (`NAMEDATALEN - 1` bytes); a longer one is cut to it.
const MAX_ROLE_BYTES: usize = 63;

/// Checks `role` as a role name [`setup_sql`] can print: quoted, any character but the control
/// ones (which no one means in a role's name, and which a DBA reading the SQL would not see).
fn check_role(role: &str) -> Result<()> {
    let why = if role.is_empty() {
        "is empty"
    } else if role.len() > MAX_ROLE_BYTES {
        "is longer than 63 bytes, where PostgreSQL would cut it to another role's name"
    } else if role.chars().any(char::is_control) {
        "has a control character (a line break, a tab, a NUL)"
    } else {
        return Ok(());
    };
    Err(LockError::InvalidOption(format!(
        "the role to grant to ({role:?}) {why}"
    )))
}

/// A guarded write's statement: `write` (a data-modifying statement that writes only if the CTE
/// `held` has a row) after the check of the holder (`$1` id, `$2` token, `$3` its lock's
/// segment), live by the server's clock and locked `FOR SHARE`, so that no step removes it
/// before this one commits: its entry, or the lock's row where it is kept (schema.sql). Answers
/// (held, applied).
fn guarded(write: &str) -> String {
    include_str!("sql/guarded.sql").replace("{write}", write.trim_end())
}

/// The upsert of `grant_in_row` (see [`Sql::grant_in_row`]). `first` is the token of a new row:
/// above the high-water mark, read `FOR SHARE` only when the statement began with no row there
/// (the `CASE` evaluates one branch), else 0 (no grant: a row the statement saw went meanwhile).
/// `OFFSET 0` keeps it one subquery, evaluated once.
const GRANT_IN_ROW: &str = include_str!("sql/grant_in_row.sql");

impl Sql {
    /// The statements of `schema` (an identifier of `[a-z_][a-z0-9_]*`, checked by `config.rs`).
    pub fn new(schema: &str) -> Sql {
        let fill = |text: &str| fill(schema, text);
        Sql {
            channel: format!("locksmith_{schema}"),
            create: fill(include_str!("sql/schema.sql")),
            version: fill(include_str!("sql/version.sql")),
            migrate: fill(include_str!("sql/migrate.sql")),
            grant_in_row: fill(GRANT_IN_ROW),
            // The outer reads see the row as it was when the statement began (not the CTE's
            // write): held by a holder in the row then, the lock is busy now, or was.
            // Busy is a final answer only for a holder whose lease ends within its TTL: one
            // further ahead (the server's clock stepped back) is bounded by the full step's prune.
            try_in_row: fill(&include_str!("sql/try_in_row.sql").replace("{grant_in_row}", GRANT_IN_ROW.trim_end())),
            leave: fill(include_str!("sql/leave.sql")),
            confirm: fill(include_str!("sql/confirm.sql")),
            guarded_put: fill(&guarded(include_str!("sql/guarded_put.sql"))),
            guarded_delete: fill(&guarded(include_str!("sql/guarded_delete.sql"))),
            guarded_swap: fill(&guarded(include_str!("sql/guarded_swap.sql"))),
            guarded_insert: fill(&guarded(include_str!("sql/guarded_insert.sql"))),
            guarded_read: fill(include_str!("sql/guarded_read.sql")),
            lock_row: fill(include_str!("sql/lock_row.sql")),
            prune: fill(include_str!("sql/prune.sql")),
            queue: fill(include_str!("sql/queue.sql")),
            renew: fill(include_str!("sql/renew.sql")),
            beat: fill(include_str!("sql/beat.sql")),
            insert: fill(include_str!("sql/insert.sql")),
            next_token: fill(include_str!("sql/next_token.sql")),
            grant: fill(include_str!("sql/grant.sql")),
            restart_lease: fill(include_str!("sql/restart_lease.sql")),
            sweep: fill(include_str!("sql/sweep.sql")),
            // A data-modifying WITH runs once whether or not the SELECT reads it.
            advance_and_notify: fill(include_str!("sql/advance_and_notify.sql")),
            delete: fill(include_str!("sql/delete.sql")),
            close_rows: fill(include_str!("sql/close_rows.sql")),
            close: fill(include_str!("sql/close.sql")),
            list: fill(include_str!("sql/list.sql")),
            delete_holders: fill(include_str!("sql/delete_holders.sql")),
            add_pruned: fill(include_str!("sql/add_pruned.sql")),
            idle_claim: fill(include_str!("sql/idle_claim.sql")),
            idle_locks: fill(include_str!("sql/idle_locks.sql")),
            idle_queued: fill(include_str!("sql/idle_queued.sql")),
            idle_owners: fill(include_str!("sql/idle_owners.sql")),
            idle_count: fill(include_str!("sql/idle_count.sql")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The role appears only in the GRANT statements, quoted: never in a comment, where a line
    /// break in it once ended the comment and ran the rest as SQL (`--grant $'app\nDROP …'`).
    #[test]
    fn the_role_is_only_in_the_grants_quoted() {
        let sql = setup_sql("locks", Some("app \"zq\"")).expect("a role PostgreSQL can have");
        let with_role: Vec<&str> = sql.lines().filter(|l| l.contains("zq")).collect();
        assert!(!with_role.is_empty());
        for line in with_role {
            assert!(!line.contains("--"), "the role in a comment: {line}");
            assert!(line.contains("TO \"app \"\"zq\"\"\""), "not quoted: {line}");
        }
    }

    #[test]
    fn a_role_postgres_cannot_have_is_refused() {
        for role in [
            "",
            "app\nDROP TABLE victim; --",
            "app\r",
            "a\0b",
            "tab\there",
            &"r".repeat(64),
        ] {
            match setup_sql("locks", Some(role)) {
                Err(LockError::InvalidOption(message)) => assert!(message.contains("role"), "{message}"),
                other => panic!("{role:?}: {other:?}"),
            }
        }
        let longest = "é".repeat(31) + "r"; // 63 bytes
        assert!(setup_sql("locks", Some(&longest)).is_ok());
        assert!(setup_sql("locks", None).is_ok());
    }
}
