//! locksmith backend on PostgreSQL: `postgres://user:password@host:5432/db` (or `postgresql://`).
//!
//! For teams that already run PostgreSQL and want locks with leases, fencing tokens, FIFO,
//! semaphores, read-write locks and elections without another server.
//!
//! ```no_run
//! # async fn run() -> locksmith_core::Result<()> {
//! let url = locksmith_core::driver::BackendUrl::parse("postgres://app:secret@db:5432/app")?;
//! let locker = locksmith_postgres::connect(&url).await?;
//! let guard = locker.lock("nightly").acquire().await?;
//! // ... the job, writing with guard.fencing_token() ...
//! guard.release().await?;
//! locker.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! Tables in one schema (`schema=`, default `locksmith`), created on first use with a version
//! row (`src/sql/schema.sql`): `locks` (one row per lock name and family, with its last fencing
//! token), `entries` (holders and waiters, in arrival order by `seq`), `owners` (one row per
//! live locker). Every step is one transaction: lock the lock's row (`INSERT … ON CONFLICT DO
//! UPDATE`, inserting it if missing), drop the dead entries, read the queue, decide with
//! locksmith-core's queue rule, write, `NOTIFY` the schema's channel with the lock's segment if the
//! queue changed, commit. The uncontended cases take one round trip instead: a function of
//! `src/sql/alone.sql` grants an exclusive entry on a queue with no live entry, or hands a queue
//! of exclusive entries from its holder to its first waiter, and answers "not my case" otherwise
//! (then the full step runs); the new holder confirms with one `UPDATE`.
//!
//! - **Holders that stop** (a paused process, an abandoned guard) lose the lock after its TTL: a
//!   holder's `expires_at` is on the **server's** clock (`clock_timestamp()`), renewed by
//!   `renew_many`, one statement per interval for every lease of the locker. `entries` and
//!   `owners` are created with `fillfactor = 50`, so that a renewal rewrites a row beside its old
//!   version (a HOT update: no index entry, the old version pruned on the next visit, with or
//!   without autovacuum): held leases cost no table growth. Tables created before this release
//!   keep full pages until their owner runs, once,
//!   `ALTER TABLE "locksmith".entries SET (fillfactor = 50)` (and the same on `owners`).
//! - **A server clock stepped back** by `d` gives every `expires_at` `d` more; the next step on
//!   the lock (`prune.sql`) gives a lease that ends further ahead than its TTL its TTL from now,
//!   so a holder that died is gone one TTL after a contender saw it, not after `d` (a live holder
//!   renewed less than a TTL ago and loses nothing). Waiters' owner rows are not bounded (their
//!   heartbeat TTL is not stored): a locker that died just before such a step keeps its waiters'
//!   places for the step. A step forward shortens every lease by its size: fencing tokens are the
//!   protection there (they never go backwards: they come from a counter in `locks`).
//! - **Waiters of a process that dies** do not block the queue: a waiter lives while its locker's
//!   owner row is unexpired, and a waiting locker beats it every third of its TTL.
//! - **Waiters are woken by the server** (LISTEN/NOTIFY), and only those that must act: a release
//!   grants the next waiter in its own transaction and the notification names it (it confirms
//!   with one step) and the first waiter left in line (which alone watches the holders' expiry).
//!   A hand-over costs two transactions whatever the number of waiters; nothing polls. Waiters of
//!   lockers that stopped beating are swept by the heartbeat of the live ones.
//! - **Fencing tokens** are the lock row's `last_token` plus one, and at least the server's clock
//!   in microseconds since the Unix epoch (about 1.8 × 10^15 today): they survive server
//!   restarts, and stay above every earlier token after the server lost commits that handed
//!   tokens out (a failover to a standby that missed them, a restore from a backup), as long as
//!   the server's clock has not stepped back past those grants (`tests/data_loss.rs`).
//! - **Cancellation**: an `acquire` given up on removes its entry, after any step still in flight
//!   (`cleanup.rs`).
//! - **Connections**: one per locker, whatever the number of locks and waiters: steps,
//!   renewals, heartbeats and the `LISTEN` share it. Steps of one locker run one at a time; a
//!   renewal or heartbeat goes before every step waiting for the connection (after the one in
//!   flight), so a backlog of steps never delays a lease. 1,000 waiters in 10 processes use 10
//!   connections (`tests/processes.rs` counts them in `pg_stat_activity`); connecting opens a
//!   second one for a moment, to check that a NOTIFY from another session reaches the `LISTEN`
//!   (what a transaction pooler breaks, below). A connection that goes silent without closing (a
//!   flow a NAT or firewall dropped) is replaced: a request unanswered within the request timeout
//!   drops it, and an idle one is probed (`SELECT 1`) every request timeout; when it is replaced,
//!   every waiter takes a step (a notification may have been missed). Every connection has TCP
//!   keepalives (30 s idle). A step cut off that way mid-transaction is ended by the server
//!   (`idle_in_transaction_session_timeout`, the request timeout): its session would otherwise
//!   keep the lock's row locked against every client until the server's TCP gave up. Tested
//!   through a proxy that freezes the connections open (`tests/half_open.rs`).
//! - **Debug builds connect slowly unless told**: the server's default password login,
//!   SCRAM-SHA-256, runs 4,096 rounds of HMAC-SHA-256 on the client at every connection;
//!   unoptimised, in a debug build of your program, that alone takes 0.1–0.4 s per connection
//!   (a new user measured 0.35 s). Optimise the crates that do it, in your program's
//!   `Cargo.toml` (this workspace does; a debug `locksmith inspect` then takes 20 ms in all):
//!
//!   ```toml
//!   [profile.dev.package.sha2]
//!   opt-level = 3
//!   [profile.dev.package.hmac]
//!   opt-level = 3
//!   [profile.dev.package.digest]
//!   opt-level = 3
//!   [profile.dev.package.postgres-protocol]
//!   opt-level = 3
//!   ```
//! - **PgBouncer**: works in **session** pooling mode, and in **transaction** pooling mode with
//!   `listen=HOST:PORT` (tested: every shared conformance suite passes through each,
//!   `tests/pgbouncer.rs`, `tests/transaction_pooling.rs`). A transaction pooler gives each
//!   transaction whichever server session is free, so nothing of a session lasts: with
//!   `listen=`, locksmith prepares no statement by name (each is sent unnamed with its
//!   parameter types, learned once per connection by a simple query that prepares, reads and
//!   deallocates it), sets its session settings in every transaction, and sends a write outside
//!   a step as `BEGIN`, the statement and `COMMIT` at once. `LISTEN` cannot work through it at
//!   all, so the `LISTEN` connection goes to the `listen=` servers (the PostgreSQL server itself,
//!   or a session-mode pool; user, password, database and TLS as the URL's): one per locker
//!   besides the pooler's. A URL that reaches a transaction pooler without `listen=` is refused
//!   at connect with [`locksmith_core::LockError::InvalidUrl`] naming the fix (a NOTIFY from a
//!   second session did not reach the `LISTEN` within the connect timeout). `layout=advisory`
//!   holds session locks and cannot go through a transaction pooler. Statement pooling cannot
//!   carry the steps' transactions.
//!
//! # URL
//!
//! `postgres://user:password@host:port/db`: port 5432, user `postgres` and the user's database by
//! default. The password comes from the URL, `password_file=`, or `LOCKSMITH_PASSWORD`, and is
//! never printed. Options: `ttl=`, `request_timeout=` (5 s), `connect_timeout=` (5 s; libpq's
//! bare seconds, `connect_timeout=10`, too), `schema=`, `layout=default|advisory` (below),
//! `replication=sync|async` (below), `listen=host:port[,host:port…]` (behind a transaction
//! pooler, above). From libpq, so that a hosting provider's `DATABASE_URL` works as it is:
//! `application_name=` (what `pg_stat_activity` shows; `locksmith` by default), `options=` (the
//! session's start-up options, `-c name=value`), `target_session_attrs=` (`any`, `read-write`
//! or `primary`: locksmith always connects to the server that takes writes; the values that ask
//! for a standby are refused), and `sslrootcert=`, `sslcert=`, `sslkey=` (the same as `ca=`,
//! `cert=`, `key=`). An unknown option is refused, every one named.
//!
//! **A primary and its standbys**: `postgres://user@db1:5432,db2:5432/db` names every server;
//! each connection goes to the one that accepts writes (the others are asked in turn, each host
//! given its share of `connect_timeout` to answer, so that a primary cut off in silence leaves
//! time for the rest), so after a standby is promoted, locksmith's reconnections find it. Every
//! commit of locksmith's sessions is durable before it is answered (`synchronous_commit = on`,
//! whatever the server's default), and with several hosts the primary must have a **synchronous
//! standby** (`synchronous_standby_names` set; otherwise connecting fails and says so): a grant
//! is then on a standby before anyone is told of it, and a promotion keeps every lock and
//! fencing token (tested by killing the primary and promoting its standby, `tests/failover.rs`).
//! `replication=async` accepts a primary without one, and its commits wait for the primary's own
//! disk only (`synchronous_commit = local`), even where the server names synchronous standbys
//! (tested with the standby stopped, `tests/failover.rs`): a failover may then hand a lock out twice,
//! though with a larger token (the clock's floor, above), so a fenced store rejects the holder it
//! overtook. `replication=sync` asks for the check with one host too (a
//! virtual address in front of a primary).
//!
//! **TLS** (Cargo feature `tls`: rustls on aws-lc-rs, no OpenSSL): `sslmode=require` or
//! `sslmode=verify-full`; both verify the server's certificate chain (against `ca=`, a PEM bundle,
//! else the system's roots) and its name (the URL's host, or `server_name=`): unlike libpq's
//! `require`, locksmith never talks to a server it has not verified, and there is no `prefer`
//! that would fall back to plain text. `cert=` and `key=` give a client certificate (mutual TLS,
//! `clientcert=verify-ca|verify-full` in `pg_hba.conf`). The default is `sslmode=disable` (plain
//! TCP). Tested against a server that accepts only TLS with a password and a client certificate
//! (`tests/secure.rs`).
//!
//! # Sharing locks with `pg_advisory_lock` (`layout=advisory`)
//!
//! With `?layout=advisory` a lock name is a bigint key (`"42"`), and a holder also holds the
//! session advisory lock of that key, on a session of its own that stays with the lease: programs
//! that call `pg_advisory_lock(42)` / `pg_try_advisory_lock(42)` (or `_shared`, for read locks)
//! themselves exclude locksmith clients and are excluded by them. Among locksmith clients every
//! guarantee of the default layout holds; the other programs get no fencing token and no lease
//! (their lock lives with their session). Mutexes and read-write locks only. What it keeps and
//! what it cannot give: `docs/interop.md`, "PostgreSQL" (tested against `psql` in
//! `tests/advisory.rs`).
//!
//! # Set-up and rights
//!
//! **The schema and `search_path`.** PostgreSQL's default `search_path` is `"$user", public`: for
//! a user named like locksmith's schema (a role `locksmith` and the default `schema=locksmith`),
//! that schema comes first, and the application's own unqualified `CREATE TABLE orders` would
//! land among locksmith's tables once the first locker created them. locksmith's own statements
//! always name the schema, so they are not affected; your application's are. Give such a user
//! another `schema=` (every locker of a lock must use the same), or set its `search_path`
//! (`ALTER ROLE locksmith SET search_path = public`). The default is not changed for this: lockers
//! of two releases with different defaults would not see each other's locks.
//!
//! The first locker creates the schema and its tables (`src/sql/schema.sql`, in one transaction
//! under an advisory lock; a `meta` row holds their format version, which every locker checks at
//! connect, so a later release can migrate them). That needs `CREATE` on the database. To run
//! lockers as a user without it, create the tables beforehand as the database's owner:
//! `locksmith --url postgres://owner@db/app init` does what a first locker does, and
//! `locksmith --url … init --sql --grant app_user` prints the SQL instead ([`setup_sql`]),
//! with the grants a locker's user needs and nothing more:
//!
//! ```sql
//! GRANT USAGE ON SCHEMA "locksmith" TO app_user;
//! GRANT SELECT ON "locksmith".meta TO app_user;
//! GRANT SELECT, INSERT, UPDATE, DELETE ON "locksmith".locks TO app_user;
//! GRANT SELECT, INSERT, UPDATE, DELETE ON "locksmith".owners, "locksmith".entries TO app_user;
//! GRANT USAGE ON SEQUENCE "locksmith".entries_seq_seq TO app_user;
//! GRANT SELECT, INSERT, UPDATE, DELETE ON "locksmith".data TO app_user;
//! GRANT EXECUTE ON FUNCTION "locksmith".leave_exclusive(text, text, text), "locksmith".token_after(bigint),
//!     "locksmith".lock_row(text), "locksmith".renew_leases(text, text[], text[]) TO app_user;
//! ```
//!
//! (`LISTEN`/`NOTIFY` need no grant.) A locker whose user lacks them fails at connect with
//! [`locksmith_core::LockError::Denied`]; one that lacks only the rights on `data` (tables migrated from
//! version 2 by their owner, the grants not run again) locks, and its guarded writes are `Denied`
//! with the command that prints the grants.
//!
//! # Idle rows
//!
//! Nothing piles up in the tables. A lock's row in `locks` is removed once nobody holds or waits
//! for the lock and it has been **idle for an hour**: no fencing token handed out for that long (a
//! token is at least the server's clock in microseconds, so it tells when the lock was last
//! granted) and no lease of a holder kept in the row running within it. The owner row of a locker
//! whose heartbeat ended an hour ago (a killed process) goes too, once no entry names it; the
//! entries a dead locker left go with a step on their lock, which a prune takes on an idle lock
//! whose entries are all dead. A schema is pruned about every 10 minutes by its lockers, whichever
//! looks first once a pass is due: a locker looks as it connects and then every 2.5 to 5 minutes,
//! and claims the next pass when the last began 10 minutes ago or more (the time is kept in the
//! row `~pruned`), so a `locksmith run` that connects when a pass is due runs it, and many
//! lockers of one schema do not each run passes of their own. At most 100 rows a table per
//! statement. [`locksmith_core::Locker::prune`] and `locksmith prune [--idle DURATION]
//! [--dry-run]` prune on demand; `--idle 0s` removes every lock that nobody holds or waits for now.
//!
//! - **Never a lock in use**: a row is locked as a step locks it (`FOR UPDATE`, `SKIP LOCKED`: a
//!   row a step or a grant holds is left for the next pass) and read again as committed; a row
//!   with entries queued (`queued`, the flag the one-statement grant decides on) or a live holder
//!   stays (`src/sql/idle_locks.sql`). Tested with lockers taking and releasing names, holding
//!   across their renewals and waiting, beside prunes in a loop (`tests/prune.rs`).
//! - **Tokens never go backwards**: the largest token removed is kept in the row `~pruned` of
//!   `locks` (no lock's segment has a `~`), the high-water mark that a lock's new row hands out
//!   tokens above, not only above the clock: a name used again goes on above its earlier tokens
//!   even when the server's clock stepped back since. A prune locks that row before any lock's
//!   row, and the first grant of a new row reads it `FOR SHARE`, so the two take turns; a grant
//!   whose statement met a row that a prune removed meanwhile takes the full step, which reads
//!   the mark after it locked the new row.
//! - **Rights**: `DELETE` on `locks` (new in this release's grants, below) and on `owners`. A
//!   locker whose user has only the grants of an earlier release logs a warning once and does
//!   not prune; [`locksmith_core::Locker::prune`] fails with `Denied`, saying what to grant.
//! - **Older releases beside it**: a locker of a release before pruning, on the same tables,
//!   starts a pruned lock's new row from the server's clock alone. A row is pruned only once its
//!   token is the idle time behind the clock, so such a locker could hand out a lower token only
//!   after the clock stepped back by more than that: upgrade every locker before pruning with a
//!   short `--idle`. A lock whose tokens ran ahead of the clock (after such a step) is kept until
//!   the clock passes them.
//!
//! # Guarded writes
//!
//! `guard.guarded()` writes to the schema's `data` table (one row per key, `bytea` values): one
//! statement finds the holder's entry with its token and a lease live by the server's clock,
//! locks it `FOR SHARE` (a release, a prune or the next grant waits for it), and writes only if it
//! found it. Any text is a key; the lock tables are not reachable through it.
//!
//! # Module map
//!
//! The files of `docs/backend-guide.md`:
//! - `config.rs` (the URL), `error.rs` (tokio-postgres errors → `LockError`), `layout.rs` (the
//!   SQL names and statements; lock rows keyed by `Family::segment`), `sql/` (the `.sql` files);
//! - `conn/`: the connections and the owner row (`mod.rs`), one step = one transaction
//!   (`txn.rs`), a connection reopened when lost (`link.rs`); `dial.rs`: a connection's socket,
//!   opened by us so that it closes with a reset;
//! - `protocol/`: the steps on a queue (`queue.rs`), the one wait loop of every kind (`wait.rs`),
//!   elections (`election.rs`);
//! - `idle.rs` (pruning idle lock rows and dead lockers' owner rows, with `sql/idle_*.sql`);
//! - `wake.rs` (LISTEN/NOTIFY), `renew.rs` (`renew_many`), `cleanup.rs` (an entry given up on),
//!   `listing.rs` (`inspect`, `list`), `backend.rs` (`impl LockBackend`), `tls.rs` (rustls
//!   under tokio-postgres, feature `tls`), `advisory.rs` (`layout=advisory`), `guarded.rs` (guarded
//!   writes: the holder's check and the write in one statement).

#![warn(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item shows the feature that enables it.
#![cfg_attr(docsrs, feature(doc_cfg))]
// The connector is cloned for every connection: rustls's with `tls`, `NoTls` (a Copy type)
// without it, where clippy would have the clones removed and the `tls` build then fail.
#![cfg_attr(not(feature = "tls"), allow(clippy::clone_on_copy))]

mod advisory;
mod backend;
mod cleanup;
mod config;
mod conn;
mod dial;
mod error;
mod guarded;
mod idle;
mod layout;
mod listing;
mod protocol;
mod renew;
#[cfg(feature = "tls")]
mod tls;
mod wake;

pub use backend::PgBackend;
pub use config::OPTIONS;

use locksmith_core::driver::{BackendUrl, Connecting, Descriptor, TtlScope};
use locksmith_core::{Locker, Result};

/// This backend in the registry of `locksmith::connect`.
pub static DESCRIPTOR: Descriptor = Descriptor {
    name: "postgres",
    schemes: &["postgres", "postgresql"],
    feature: Some("postgres"),
    options: OPTIONS,
    ttl: TtlScope::PerLock,
    connect: connect_boxed,
};

fn connect_boxed(url: &BackendUrl) -> Connecting<'_> {
    Box::pin(connect(url))
}

/// The SQL that prepares `url`'s schema for lockers: its tables (what the first locker runs
/// itself), then, when `role` is given, the grants a locker's user needs (see [Set-up and
/// rights](crate#set-up-and-rights)). Nothing is sent to the server.
///
/// # Errors
///
/// [`locksmith_core::LockError::InvalidUrl`] when `url` is not a valid `postgres://` URL;
/// [`locksmith_core::LockError::InvalidOption`] when `role` is no role name PostgreSQL can have:
/// empty, longer than 63 bytes (the server would cut it to another role's name), or with a
/// control character (a NUL, a line break).
///
/// # Examples
///
/// ```
/// let url = locksmith_core::driver::BackendUrl::parse("postgres://admin@db/app?schema=locks")?;
/// let sql = locksmith_postgres::setup_sql(&url, Some("app_user"))?;
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS \"locks\".entries"));
/// assert!(sql.contains("TO \"app_user\""));
/// # Ok::<(), locksmith_core::LockError>(())
/// ```
pub fn setup_sql(url: &BackendUrl, role: Option<&str>) -> Result<String> {
    let config = config::Config::parse(url)?;
    layout::setup_sql(&config.schema, role)
}

/// Connects to the server of `url` (see the [crate docs](crate)) and returns a [`Locker`] over
/// it.
///
/// # Errors
///
/// [`locksmith_core::LockError::InvalidUrl`] for a bad URL, [`locksmith_core::LockError::Denied`] for a wrong
/// password or missing privileges, [`locksmith_core::LockError::Unavailable`] when the server cannot be
/// reached.
pub async fn connect(url: &BackendUrl) -> Result<Locker> {
    Ok(Locker::new(PgBackend::connect(url).await?))
}
