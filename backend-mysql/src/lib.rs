//! locksmith's backend on **MySQL** and **MariaDB** (`mysql://` and `mariadb://` URLs): every
//! kind of lock (mutex, semaphore, read-write lock, election with observers) as a queue of rows
//! in InnoDB tables, leases on the server's clock, fencing tokens kept in a table, guarded writes,
//! and wake-ups sent by the server.
//!
//! ```text
//! mysql://user:password@host:3306/database?ttl=15s&request_timeout=5s&heartbeat=1s
//! mysql://user:password@db1:3306,db2:3306/database
//! ```
//!
//! Options: `ttl` (a lock's default TTL), `request_timeout`, `connect_timeout`, `heartbeat` (how
//! often a locker renews its waiting entries and sweeps expired ones; 1 s), `password_file`,
//! `ssl_mode` (`disabled`, `required`/`verify_ca`, `verify_identity`; feature `tls`: rustls on
//! aws-lc-rs), `ca` (the roots; else the bundled Mozilla roots of sqlx), `cert` and `key` (a client
//! certificate), `layout` (`default`, or `get_lock`: locks shared with programs that call
//! `GET_LOCK`, below), `procedures` (`on`; `off`: no stored procedures, see Rights),
//! `replication` (`sync` or `async`, below).
//!
//! **A primary and its replicas**: `mysql://user@db1:3306,db2:3306/database` names every server;
//! each connection goes to the one that takes writes (`@@read_only` off, and `@@super_read_only`
//! where the server has it, as MySQL does; a replica, or a closed port, is skipped and the next
//! host asked, each host given its share of `connect_timeout` to answer, so that a primary cut
//! off in silence leaves time for the rest), so after a replica is promoted, locksmith's
//! reconnections find it; with none writable (a failover under way) connecting fails with
//! `Unavailable`, naming each host and why it was skipped. A connection still open to a primary
//! demoted under it (made read only) is dropped at the first write it refuses (error 1290) and
//! opened again, to the promoted replica. With several hosts the primary must have
//! **semi-synchronous replication** on and working (`rpl_semi_sync_master_enabled`, or MySQL's
//! `rpl_semi_sync_source_enabled`; its status `ON`): a grant is then on a replica before anyone
//! is told of it, and a promotion keeps every lock and fencing token (tested by killing the
//! primary and promoting its replica, `tests/failover.rs`). A primary with it off is refused
//! (`Protocol`: a setting, no retry mends it; the error names the fix); a primary whose replica
//! stopped acknowledging, and which went on alone after `rpl_semi_sync_master_timeout`, is
//! skipped as `Unavailable` until a replica catches up. The check is made when a connection
//! opens (a primary that goes on alone later is not seen by the connections already open).
//! `replication=async` drops the check: commits then wait for whatever the server's settings
//! say (locksmith cannot change that from a session, unlike PostgreSQL's `synchronous_commit`),
//! and a failover may hand a lock out twice, though with a larger token (the clock floor, below),
//! so a fenced store rejects the holder it overtook (tested with the replica cut off,
//! `tests/failover.rs`). `replication=sync` asks for the check with one host too (a virtual IP
//! or a proxy in front of a primary, which also works: `tests/failover.rs`). A user with `SUPER`
//! (or MariaDB's `READ ONLY ADMIN`) may write to a server made `read_only`: give locksmith a user
//! without it, or use MySQL's `super_read_only`, so that a demoted primary refuses its writes.
//!
//! TLS is sqlx's: rustls on aws-lc-rs with feature `tls`, unless another crate of the program
//! turns on sqlx's `native-tls`, which sqlx then prefers (OpenSSL: so it is in this workspace's
//! all-features build, through lockbench's PostgreSQL peer). Either way a server that refuses the
//! client certificate is `Denied`: where the connection's reset hides the server's alert,
//! `cert_check.rs` asks the server once more with rustls.
//!
//! # Design
//!
//! - **Tables** (made at first connect in the URL's database): `locksmith_locks` (a row per lock:
//!   its segment, its `lock_id`, its token counter, and the holder of a mutex nobody else wanted:
//!   an uncontended cycle updates this row twice and writes no entry; a step that may queue an
//!   entry moves that holder into the queue first), `locksmith_entries` (the queue: one row per
//!   holder or waiter, ordered by an auto-increment `seq`, with its role, lease TTL, `held`,
//!   token and `expires_at` on the server's clock), `locksmith_owners` (each locker's wait
//!   connection id), `locksmith_wakes` (the lockers' mailboxes), `locksmith_watches` (who
//!   observes an election), `locksmith_data` (guarded writes). Every statement is a file of
//!   `src/sql/`.
//! - **Queue rule**: as on PostgreSQL, `locksmith_core::driver::queue::standing` over the live
//!   entries in arrival order. Each step is one transaction under the lock's row (`FOR UPDATE`):
//!   prune what expired, read, step, wake, commit.
//! - **Fencing tokens**: `GREATEST(counter + 1, server clock in µs)` from the lock's row, so they
//!   grow across restarts (InnoDB keeps the row) and across a failover to a replica that missed
//!   commits (the clock floor).
//! - **Wake-ups**: see `wake.rs`: a locker's one wait connection waits in `GET_LOCK` on a name its
//!   steps' connection holds, guarded by a mailbox read; the step that makes a waiter's turn come writes its mailbox row and sends
//!   `KILL QUERY` to that connection (found by its mark, a named lock it holds). That step grants
//!   the waiter in its own transaction, and the waiter holds on the grant its locker's mailbox
//!   read brings, without a statement of its own. Two
//!   connections per locker, whatever its number of waiters.
//!   Lockers of different users need `CONNECTION ADMIN` (or `SUPER`) to wake each other; without
//!   it a waiter finds its wake-up at its next heartbeat.
//! - **Expiry**: a lease ends at `expires_at` by the server's clock even while its holder's
//!   connection stays open (a stopped process); waiters of that lock re-check at that time, and
//!   every locker's heartbeat sweeps expired entries.
//!
//! - **Half-open connections**: every statement is bounded by the request timeout (the wait
//!   connection's wait by its length and the request timeout); a connection that misses it is
//!   dropped and opened again. A connection gone silent in the middle of a transaction keeps its
//!   row locks on the server until the session ends: the sessions set MariaDB's
//!   `idle_transaction_timeout` (three request timeouts, at least 10 s), or on MySQL, which has no
//!   such setting, `wait_timeout`.
//! - **Rights**: the user needs `CREATE`, `SELECT`, `INSERT`, `UPDATE`, `DELETE` on the database
//!   (the tables are made at the first connect; `ALTER` once where `locksmith_locks` was made by
//!   a release before the holder kept in the row, which gets its columns at connect) and nothing
//!   global: a user may `KILL QUERY` its own connections. With `CREATE ROUTINE` too (or
//!   `EXECUTE` on procedures an administrator made), the common steps are one `CALL` each
//!   (`protocol/call.rs`, `conn/routines.rs`); without it, or with `procedures=off`, every step
//!   is a transaction of about ten statements (a warning says so at connect).
//!
//! # Sharing locks with `GET_LOCK` (`layout=get_lock`)
//!
//! With `?layout=get_lock` a lock is also the server's named lock of its name, exactly as
//! `SELECT GET_LOCK('orders/42', 10)` takes it: PHP, Rails (`with_advisory_lock` on MySQL),
//! Laravel, Python programs or the `mysql` client that call `GET_LOCK`/`RELEASE_LOCK` themselves
//! exclude locksmith clients and are excluded by them (`tests/get_lock.rs`, against the `mysql`
//! command-line client both ways, and the shared mutex conformance suite under this layout).
//!
//! - **The name** is the `GET_LOCK` name byte for byte (no prefix, no encoding, not truncated):
//!   at most 64 characters (MySQL's limit) and 192 bytes of UTF-8 (MariaDB's), else
//!   `InvalidName`. MariaDB 10.11 compares names byte for byte (measured: `Abc` and `abc` are two
//!   locks, although its documentation calls them case-insensitive); give both sides the same
//!   spelling. Names `locksmith-wait-<16 hex digits>` and `locksmith-mark-<16 hex digits>-<id>`
//!   are each locker's own (its steps' connection holds the first for its wait connection to wait
//!   on, its wait connection the second, `wake.rs`): use no lock of those forms.
//! - **Kinds**: mutexes only. `GET_LOCK` has no shared mode, no count and no election:
//!   `rwlock`, `semaphore` and `election` (campaign, `leader`, `observe`) are refused with
//!   `InvalidOption`. Guarded writes work; a `TokenRegister`'s lock (`locksmith-register/<name>`)
//!   must fit in 64 characters too.
//! - **Who holds it**: a holder holds its grant in the tables (the default layout's queue,
//!   unchanged: FIFO and fencing tokens among locksmith clients, a lease on the server's clock)
//!   and the named lock, taken once the grant is there, on a connection of its own (`GET_LOCK`
//!   is per session) that stays with the lease until it ends. Only the head of a lock's queue
//!   waits in `GET_LOCK(name, time left)`, woken by the server when the name is freed, renewing
//!   its grant meanwhile; the other locksmith waiters wait in the tables.
//! - **Connections**: one per held lock and per queue head waiting in `GET_LOCK`, on top of the
//!   locker's two; up to four are kept for later locks. Count them in `max_connections`. A named
//!   lock belongs to a server session: a proxy in between must keep each client connection on one
//!   server session.
//! - **Leases**: a held lock's session has `wait_timeout` set to the lease's TTL (whole seconds,
//!   rounded up) and is pinged at every renewal (`IS_USED_LOCK(name) = CONNECTION_ID()`, which
//!   also checks that it still holds the name). A holder stopped with SIGSTOP, its TCP connection
//!   still open, stops pinging: the server ends the session after the TTL and frees the name
//!   (measured: a `mysql` client waiting in `GET_LOCK` gets it, and the holder is told `lost()`
//!   when it runs again). The other programs have no lease: their lock lives with their session.
//! - **A session that ends** (`KILL`, `wait_timeout`, a server restart, a broken connection) frees
//!   the name at once; the holder is told (`lost()`) at its next renewal (a third of the TTL), whose
//!   ping fails, and its grant leaves the tables.
//! - **Fencing tokens** are the grants' (the lock's row): only locksmith holders have them.
//! - **FIFO** holds among locksmith clients; between them and the other programs, the order is the
//!   server's, which MySQL's documentation calls undefined.
//! - **Cancel safety**: a wait given up (timeout, dropped future, error) closes its session and
//!   `KILL`s it from the locker's steps connection, so the server never grants the name to a
//!   session nobody listens to; a timeout that `GET_LOCK` itself answered keeps its clean session.
//! - `list`/`inspect` show locksmith's holders and waiters only; `IS_USED_LOCK('name')` shows the
//!   session holding a name, whoever it is.
//!
//! See `docs/interop.md`, "MySQL and MariaDB".
//!
//! # Not yet (issue 63, phase 1)
//!
//! - `SO_LINGER` 0 on the sockets (sqlx opens them; a step sent before a partition may still
//!   arrive after it heals, where its transaction's lock wait and timeout bound its effect).
//! - A step that the stored procedures do not decide (a queue with readers, permits, observers
//!   or expired entries) is a transaction of several statements, about ten round trips.
//! - Table versions: the tables are made with `CREATE TABLE IF NOT EXISTS`, and the one change so
//!   far (the holder kept in the lock's row) is added at connect by looking for its column. A
//!   locker of the release before it must not run beside lockers of this one (CHANGELOG).
//!
//! # Modules
//!
//! | file | role |
//! |---|---|
//! | `config.rs` | the URL |
//! | `error.rs` | sqlx's errors → `LockError` |
//! | `layout.rs` | segments, the statements of `sql/` |
//! | `backend.rs` | `impl LockBackend` |
//! | `conn/` | the steps' connection, steps run in tasks of their own; `dial.rs` which host a connection goes to, and its session; `routines.rs` the stored procedures |
//! | `protocol/` | `queue.rs` the steps, `call.rs` their one-call cases, `wait.rs` the wait loop, `election.rs` |
//! | `wake.rs` | the wait connection: heartbeat, sweep, mailbox, the wait |
//! | `hub.rs` | where the wake-ups go: the locker's waiters and observers |
//! | `kill.rs` | the `KILL QUERY` a step sends to the waiting lockers' wait connections |
//! | `renew.rs` | `renew_many`: three statements for every lease due (per ten thousand) |
//! | `cleanup.rs` | the clean-up guard of an entry nobody holds yet |
//! | `listing.rs` | `list` and `inspect` |
//! | `guarded.rs` | guarded writes |
//! | `prune.rs` | `prune`: the rows of idle locks, the high-water mark of their tokens |
//! | `getlock.rs` | `layout=get_lock`: the sessions holding and awaiting `GET_LOCK` names |
//! | `cert_check.rs` | (feature `tls`) whether the server refuses our client certificate, when the connection's reset hid its alert |
//!
//! `conn/dial.rs` chooses the host, but sqlx opens the sockets itself (so `SO_LINGER` 0 is not
//! set: a phase-1 gap); no `tls.rs` (sqlx does its TLS handshakes itself, on rustls with
//! aws-lc-rs).
//!
//! # Examples
//!
//! ```no_run
//! # async fn run() -> locksmith_core::Result<()> {
//! let url = locksmith_core::driver::BackendUrl::parse("mysql://app:secret@db/locks")?;
//! let locker = locksmith_mysql::connect(&url).await?;
//! let guard = locker.lock("orders/42").acquire().await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod backend;
#[cfg(feature = "tls")]
mod cert_check;
mod cleanup;
mod config;
mod conn;
mod error;
mod getlock;
mod guarded;
mod hub;
mod kill;
mod layout;
mod listing;
mod protocol;
mod prune;
mod renew;
mod wake;

pub use backend::MysqlBackend;
pub use config::OPTIONS;

use locksmith_core::driver::{BackendUrl, Connecting, Descriptor, TtlScope};
use locksmith_core::{Locker, Result};

/// This backend in the registry of `locksmith::connect`.
pub static DESCRIPTOR: Descriptor = Descriptor {
    name: "mysql",
    schemes: &["mysql", "mariadb"],
    feature: Some("mysql"),
    options: OPTIONS,
    ttl: TtlScope::PerLock,
    connect: connect_boxed,
};

fn connect_boxed(url: &BackendUrl) -> Connecting<'_> {
    Box::pin(connect(url))
}

/// Connects to the server of `url` (see the [crate docs](crate)) and returns a [`Locker`] over
/// it.
///
/// # Errors
///
/// [`locksmith_core::LockError::InvalidUrl`] for a bad URL, [`locksmith_core::LockError::Denied`]
/// for a wrong password, a missing database or TLS that cannot be established,
/// [`locksmith_core::LockError::Unavailable`] when the server cannot be reached (with several
/// hosts: none takes writes now), [`locksmith_core::LockError::Protocol`] with
/// `replication=sync` (the default with several hosts) for a primary without semi-synchronous
/// replication.
///
/// # Cancel safety
///
/// Dropped, nothing is left on the server.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> locksmith_core::Result<()> {
/// let url = locksmith_core::driver::BackendUrl::parse("mariadb://app:secret@db/locks?ttl=10s")?;
/// let locker = locksmith_mysql::connect(&url).await?;
/// # Ok(()) }
/// ```
pub async fn connect(url: &BackendUrl) -> Result<Locker> {
    Ok(Locker::new(MysqlBackend::connect(url).await?))
}
