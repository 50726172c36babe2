//! Where a lock lives: its segment (`Family::segment` of its encoded name) is the key of its row
//! in `locksmith_locks`, whose `lock_id` its entries carry; and the statements, read from the
//! `.sql` files of `src/sql/` with `include_str!`.

use locksmith_core::driver::LockName;
use locksmith_core::{Family, LockError, Result};

/// The longest segment a lock row keeps (the column, and InnoDB's longest key).
const MAX_SEGMENT: usize = 3072;

/// The segment of `name` in `family`, refused when longer than the lock table's key.
///
/// # Errors
///
/// [`LockError::InvalidName`] when the encoded name is longer than 3,072 bytes.
pub(crate) fn segment(family: Family, name: &LockName) -> Result<String> {
    let seg = family.segment(name);
    if seg.len() > MAX_SEGMENT {
        return Err(LockError::InvalidName(format!(
            "the name's encoded form is {} bytes long; MySQL keeps at most {MAX_SEGMENT}",
            seg.len()
        )));
    }
    Ok(seg)
}

/// The statements, one `.sql` file each.
pub(crate) mod sql {
    pub const TABLES: [&str; 6] = [
        include_str!("sql/table_locks.sql"),
        include_str!("sql/table_entries.sql"),
        include_str!("sql/table_owners.sql"),
        include_str!("sql/table_wakes.sql"),
        include_str!("sql/table_watches.sql"),
        include_str!("sql/table_data.sql"),
    ];
    /// The one-call steps' stored procedures (name, definition): `conn/routines.rs`.
    pub const PROCEDURES: [(&str, &str); 2] = [
        ("locksmith_enter_v4", include_str!("sql/proc_enter.sql")),
        ("locksmith_release_v5", include_str!("sql/proc_release.sql")),
    ];
    /// Whether `locksmith_locks` has the columns of a holder kept in the row, and the statement
    /// that adds them to a table made by an earlier release (`conn/mod.rs`).
    pub const TABLE_LOCKS_COLUMNS: &str = include_str!("sql/table_locks_columns.sql");
    pub const TABLE_LOCKS_HOLDER: &str = include_str!("sql/table_locks_holder.sql");
    pub const ROUTINES: &str = include_str!("sql/routines.sql");
    pub const CALL_ENTER: &str = include_str!("sql/call_enter.sql");
    pub const CALL_RELEASE: &str = include_str!("sql/call_release.sql");
    pub const SESSION_SETTINGS: &str = include_str!("sql/session_settings.sql");
    pub const ISOLATION: &str = include_str!("sql/isolation.sql");
    pub const IDLE_TRANSACTION_TIMEOUT: &str = include_str!("sql/idle_transaction_timeout.sql");
    pub const WAIT_TIMEOUT: &str = include_str!("sql/wait_timeout.sql");
    /// Whether the server takes writes: `conn/dial.rs`.
    pub const READ_ONLY: &str = include_str!("sql/read_only.sql");
    /// Whether the primary waits for a replica's acknowledgement (`replication=sync`): `conn/dial.rs`.
    pub const SEMI_SYNC_ENABLED: &str = include_str!("sql/semi_sync_enabled.sql");
    pub const SEMI_SYNC_STATUS: &str = include_str!("sql/semi_sync_status.sql");
    pub const LOCK_ROW: &str = include_str!("sql/lock_row.sql");
    pub const LOCK_ROW_UNLESS_BUSY: &str = include_str!("sql/lock_row_unless_busy.sql");
    pub const LOCK_ID: &str = include_str!("sql/lock_id.sql");
    /// A holder kept in the lock's row moved into the queue, and the row freed (`protocol/queue.rs`).
    pub const MOVE_HOLDER: &str = include_str!("sql/move_holder.sql");
    pub const FREE_ROW: &str = include_str!("sql/free_row.sql");
    pub const PRUNE: &str = include_str!("sql/prune.sql");
    pub const PRUNE_MARK: &str = include_str!("sql/prune_mark.sql");
    pub const PRUNE_CANDIDATES: &str = include_str!("sql/prune_candidates.sql");
    pub const PRUNE_COUNT: &str = include_str!("sql/prune_count.sql");
    pub const PRUNE_DELETE: &str = include_str!("sql/prune_delete.sql");
    pub const PRUNE_RAISE_MARK: &str = include_str!("sql/prune_raise_mark.sql");
    pub const PRUNE_CLAIM_ROW: &str = include_str!("sql/prune_claim_row.sql");
    pub const PRUNE_CLAIM: &str = include_str!("sql/prune_claim.sql");
    pub const FORGET_COUNT: &str = include_str!("sql/forget_count.sql");
    pub const QUEUE: &str = include_str!("sql/queue.sql");
    pub const QUEUE_LIVE: &str = include_str!("sql/queue_live.sql");
    pub const ROW_HOLDER_LIVE: &str = include_str!("sql/row_holder_live.sql");
    pub const INSERT: &str = include_str!("sql/insert.sql");
    pub const NEXT_TOKEN: &str = include_str!("sql/next_token.sql");
    pub const READ_TOKEN: &str = include_str!("sql/read_token.sql");
    pub const GRANT: &str = include_str!("sql/grant.sql");
    pub const RESTART_LEASE: &str = include_str!("sql/restart_lease.sql");
    pub const LEAVE: &str = include_str!("sql/leave.sql");
    pub const RELEASE: &str = include_str!("sql/release.sql");
    pub const WAKE: &str = include_str!("sql/wake.sql");
    pub const WAKE_WATCHERS: &str = include_str!("sql/wake_watchers.sql");
    pub const OWNER_CONN: &str = include_str!("sql/owner_conn.sql");
    pub const WATCHER_CONNS: &str = include_str!("sql/watcher_conns.sql");
    pub const KILL_QUERY: &str = include_str!("sql/kill_query.sql");
    /// Which wait connections hold their marks ([`super::mark_prefix`]): `kill.rs`.
    pub const MARKED_CONNS: &str = include_str!("sql/marked_conns.sql");
    pub const WAITING_CONNS: &str = include_str!("sql/waiting_conns.sql");
    pub const REGISTER: &str = include_str!("sql/register.sql");
    /// The wait connection takes its mark as it registers (`wake.rs`).
    pub const TAKE_MARK: &str = include_str!("sql/take_mark.sql");
    pub const TOUCH_OWNER: &str = include_str!("sql/touch_owner.sql");
    /// What lockers unseen for an hour left (their mailbox rows, watches, owner rows), removed
    /// in one statement by each locker when its wait connection registers.
    pub const FORGET: &str = include_str!("sql/forget.sql");
    pub const BEAT: &str = include_str!("sql/beat.sql");
    pub const EXPIRED: &str = include_str!("sql/expired.sql");
    pub const WAKES_READ: &str = include_str!("sql/wakes_read.sql");
    pub const WAKES_DELETE: &str = include_str!("sql/wakes_delete.sql");
    /// The wait statement: the mailbox read, then a wait in `GET_LOCK` on the name the locker's
    /// steps' connection holds (see `wake.rs`).
    pub const WAIT: &str = include_str!("sql/wait.sql");
    /// A named lock, with a wait: a held lock's under `layout=get_lock` (`getlock.rs`), and the
    /// name a steps' connection takes as it opens for its wait connection to wait on.
    pub const GET_LOCK: &str = include_str!("sql/get_lock.sql");
    pub const RENEW_ROWS: &str = include_str!("sql/renew_rows.sql");
    pub const RENEW: &str = include_str!("sql/renew.sql");
    pub const RENEWED: &str = include_str!("sql/renewed.sql");
    pub const WATCH: &str = include_str!("sql/watch.sql");
    pub const LIST: &str = include_str!("sql/list.sql");
    /// A locker's holders kept in their locks' rows freed at once (shutdown, `listing.rs`, and
    /// the first of [`CLOSE`]).
    pub const CLOSE_ROWS: &str = include_str!("sql/close_rows.sql");
    pub const CLOSE: [&str; 5] = [
        CLOSE_ROWS,
        include_str!("sql/close_entries.sql"),
        include_str!("sql/close_watches.sql"),
        include_str!("sql/close_wakes.sql"),
        include_str!("sql/close_owner.sql"),
    ];
    pub const DELETE_HOLDERS: &str = include_str!("sql/delete_holders.sql");
    pub const DELETE_ROW_HOLDER: &str = include_str!("sql/delete_row_holder.sql");
    pub const OWN_ENTRIES: &str = include_str!("sql/own_entries.sql");
    pub const ENTRIES: &str = include_str!("sql/entries.sql");
    pub const GUARDED_CHECK_ROW: &str = include_str!("sql/guarded_check_row.sql");
    pub const GUARDED_CHECK: &str = include_str!("sql/guarded_check.sql");
    pub const GUARDED_CURRENT: &str = include_str!("sql/guarded_current.sql");
    pub const GUARDED_PUT: &str = include_str!("sql/guarded_put.sql");
    pub const GUARDED_DELETE: &str = include_str!("sql/guarded_delete.sql");
    pub const GUARDED_READ: &str = include_str!("sql/guarded_read.sql");

    /// `sql` with its `{ids}` filled with `n` placeholders (`?, ?, …`).
    pub fn with_ids(sql: &str, n: usize) -> String {
        sql.replace("{ids}", &vec!["?"; n.max(1)].join(", "))
    }
}

/// The start of the named lock that locker `owner`'s wait connection holds for as long as it is
/// open, its connection id appended (`locksmith-mark-<owner>-<connection id>`): a waker that finds
/// the mark of the registered connection id held by that very connection knows it is the
/// locker's wait connection, live on this server, and sends it `KILL QUERY` without reading the
/// process list (`kill.rs`, `sql/proc_release.sql`, which spell it the same way).
pub(crate) fn mark_prefix(owner: u64) -> String {
    format!("locksmith-mark-{owner:016x}-")
}

/// The named lock that locker `owner`'s steps' connection holds and its wait connection waits
/// on (`wake.rs`: `GET_LOCK` until the next beat).
pub(crate) fn wait_name(owner: u64) -> String {
    format!("locksmith-wait-{owner:016x}")
}
