//! locksmith backend for the processes of one machine, with no server: `file:///absolute/dir`.
//!
//! Cron jobs that must not overlap, deploy scripts, CI runners sharing a cache, a worker pool on
//! one box: what `flock(1)` is used for, with what it lacks — a lease that a paused holder loses,
//! fencing tokens, FIFO, semaphores, read-write locks and elections, timeouts, and `inspect`/`list`
//! showing who holds (host and pid).
//!
//! ```no_run
//! # async fn run() -> locksmith_core::Result<()> {
//! let url = locksmith_core::driver::BackendUrl::parse("file:///run/lock/myapp")?;
//! let locker = locksmith_file::connect(&url).await?;
//! let guard = locker.lock("nightly").acquire().await?;
//! // ... the job, writing with guard.fencing_token() ...
//! guard.release().await?;
//! locker.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! Each lock is a state file (its queue of holders and waiters in arrival order, and its last
//! fencing token) beside an empty lock file. Every change is a transaction: `flock` the lock file,
//! read the state, drop the entries of the dead, change it, write it back in place, unlock. The
//! state file holds two checksummed copies of the state, written in turn, so a write cut short
//! (a process killed in the middle of it, a full disk) leaves the previous state, and a reader
//! without the lock always sees a whole one. Who holds is locksmith-core's queue rule, as on etcd
//! and ZooKeeper. An uncontended step runs on the caller's thread (a few system calls on the page
//! cache); a step that must wait for another one's `flock` waits in a blocking thread.
//!
//! - **Processes that die** release at once: each locker holds a `flock` on a liveness file of its
//!   own in `.owners/` for as long as it lives; the kernel drops it when the process ends, however
//!   it ends, and an entry whose owner's file can be locked, or is gone, is dead. A liveness file
//!   that cannot be opened (a process out of descriptors, one without the right to read it: a
//!   locker run with umask 077 beside other users) is judged by when it was last written (every
//!   heartbeat rewrites it): a live holder is never dropped for it, and a dead one's entries end
//!   a TTL after its last heartbeat instead of at once.
//! - **Holders that stop** (a paused process, an abandoned guard) lose the lock after its TTL. An
//!   entry lives for its TTL past the later of its grant and its locker's last heartbeat, a
//!   `CLOCK_BOOTTIME` stamp in the liveness file that every renewal rewrites: one small write
//!   renews every lock of the locker, however many it holds (10,000 locks with 2 s leases hold in
//!   the fault suite's soak). A guard that stops renewing while its locker goes on is found by the
//!   next heartbeat, which removes its entry. One edge of it: a process stopped *inside* a
//!   transaction (microseconds with the lock file's `flock` held, or a few milliseconds for a
//!   grant that syncs a new block of tokens) holds up every other process's steps on that lock until it continues or
//!   dies, as no other process can take the `flock` to see that its lease ran out; the other
//!   locks of the directory are not affected. Their calls end at their deadlines
//!   (`Unavailable`), and a waiting `acquire` without one waits.
//! - **Waiters are woken by the kernel** (inotify): a state file written (or renamed into place)
//!   wakes the waiters of that lock, a liveness file closed wakes every waiter; a holder's expiry is a timer.
//!   Nothing polls. A change costs each process with waiters of that lock one read, whose
//!   result its waiters share (1,000 waiters in one process hold in the tests); only the next
//!   holder writes.
//! - **FIFO**: waiters hold in arrival order (a waiting writer holds back later readers).
//! - **Fencing tokens** strictly increase per name, across crashes, reboots and power cuts: the
//!   state file holds a reservation, a token that no token handed out exceeds, synced to disk
//!   before any token above the last reservation is returned; a new one goes a block (2^26, about
//!   67 s of the clock below) ahead, so a lock taken over and over syncs about once a minute, not
//!   at every grant. After a reboot the counter goes on above the reservation (a power cut may
//!   have lost the state written since it; see `conn/record.rs`). A process that cannot read the
//!   boot id reserves, and syncs, every token. A token is also at least the wall clock in
//!   microseconds, so a state file removed by hand goes on above every earlier token unless the
//!   clock went back. `sync=off` in the URL skips the syncs: tokens survive a power cut through
//!   that clock floor alone.
//! - **Old state files**: a state file of format 1 (JSON alone, written by locksmith 0.1) is
//!   read, and replaced by a format-2 file at its first change. Do not run older versions
//!   on the same directory as this one: they refuse format-2 files as corrupt.
//! - **Cancellation**: every step runs to its end (on the caller's thread within one poll, or in
//!   a blocking thread when it waits for another step's `flock`); an `acquire` given up on
//!   (timeout, dropped) removes its entry once its last step has ended, so it never acquires later
//!   in the background.
//! - **`lost()`** fires when a holder's entry is gone at its next renewal (a third of its TTL):
//!   its state file removed or replaced by hand, or its lease expired while the process was
//!   paused (then also when the entry is still there: another process may have read the old
//!   heartbeat and be about to drop it).
//!
//! # Guarded writes
//!
//! `guard.guarded()` writes a small key-value store in the directory's `.data/` (one file per
//! key): a put, delete or compare-and-set commits only if the guard's entry is still in its
//! lock's state file, checked in the same transaction, under the lock file's `flock`, as the
//! write. A holder whose lease another process found expired, or whose state file was removed,
//! gets [`locksmith_core::LockError::NotHeld`] and writes nothing. A value is written to a
//! temporary file and renamed into place (synced unless `sync=off`), so a crash in the middle of
//! a write leaves the value before it. Keys naming a path inside the lock directory are refused;
//! `prune` leaves `.data/` alone. See `guarded.rs`.
//!
//! # Idle locks
//!
//! Nothing piles up in the directory. A lock's files (`<stem>.lock`, `<stem>.state`, a leftover
//! `.<stem>.tmp`) are removed once nobody holds or waits for the lock and **no step touched them
//! for an hour** (every step sets its lock file's times), and so are the liveness files of dead
//! lockers in `.owners/` (which a locker also removes when it opens the directory). A directory
//! is pruned about every 10 minutes, by whichever process comes first: a locker running in a
//! Tokio runtime that opens a directory last pruned 10 minutes ago or more (the modification time
//! of `.pruned.lock`) runs a pass at once, in the background, and its later passes go by the
//! directory's last one, so a directory used only by `locksmith run`s (which live milliseconds) is
//! pruned too, and many lockers of one directory do not each run passes of their own. A pass looks
//! at no more than 4,000 locks (a random window of a larger directory) and removes at most 100; a
//! locker whose pass removed 100 runs the next a second later.
//! [`locksmith_core::Locker::prune`] and `locksmith prune [--idle DURATION] [--dry-run]` prune
//! every lock on demand, `--idle 0s` every lock that nobody holds or waits for now.
//!
//! - **Never a lock in use**: a prune takes each lock file's `flock` without waiting (a lock in a
//!   step is left for the next pass), reads the state under it and drops its dead entries as a
//!   step would: only a lock with no entry left goes, its lock file last.
//! - **The unlink race**: a process that opened a lock file before a prune removed it, and locks
//!   it after, must not step on a file nobody else will ever lock. Every step checks, once it has
//!   the `flock`, that the path still names the file it locked, and opens the new one otherwise
//!   (as it always did for a lock file removed by hand or by a `/tmp` cleaner).
//! - **Tokens never go backwards**: the largest token removed is written to `.pruned` (synced,
//!   unless `sync=off`) before any file goes, and a lock without a state file starts above it,
//!   read under its lock file's `flock`: a name used again goes on above its earlier tokens even
//!   if the wall clock went back. Prunes of a directory take turns on `.pruned.lock`.
//!
//! # Where it is not safe
//!
//! Only where every process sees one kernel's view of the directory: a local file system, or a
//! directory shared by containers of one host (a bind mount; their pid namespaces may differ, so
//! `inspect` shows each container's own pids). On NFS and other network file systems `flock` and
//! inotify do not work across machines: two machines can both hold a lock and never wake each
//! other's waiters. Use a server backend there. Names are told apart on case-insensitive file
//! systems (upper-case letters are escaped in file names).
//!
//! # URL
//!
//! `file:///absolute/dir` (or `file://localhost/absolute/dir`); relative directories are refused.
//! Options: `ttl=` (the TTL of locks whose builder sets none, as on Redis), `request_timeout=`
//! (default 5 s), `sync=grant` (the default: a grant's token is on disk before it is returned) or
//! `sync=off` (see fencing tokens above). The directory is created (mode 0775 less the umask) if missing; a directory the
//! process may not write is [`locksmith_core::LockError::Denied`]. To share it between users, give it a
//! common group, the setgid bit and a umask of 002. The `locksmith` command without a URL uses
//! [`default_dir`], `/tmp/locksmith-<uid>`, the same in every session of the user: it is created
//! mode 0700 and refused (`Denied`) unless it is the user's own directory (one of the user's that
//! others may write is made 0700), since anyone may create it first in `/tmp`. In any directory, locksmith never opens a
//! file through a symbolic link (a link planted at `.<stem>.tmp` or `<stem>.lock` is refused or
//! removed, never written through), and writes only files it has just created.
//!
//! # Module map
//!
//! The files of `docs/backend-guide.md`:
//! - `config.rs` (the URL), `error.rs` (I/O errors → `LockError`), `layout.rs` (file names),
//!   `private_dir.rs` (the default directory's checks), `safe_open.rs` (no symbolic links),
//!   `random.rs` (ids and jitter from `getrandom`);
//! - `conn/`: the directory (`mod.rs`), this locker's liveness file (`owner.rs`), transactions on
//!   a state file (`txn.rs`), the state file's layout on disk (`record.rs`), the files kept
//!   open between steps (`kept.rs`), the removal of idle locks' files (`prune.rs`) and the
//!   directory's automatic passes of it (`auto_prune.rs`);
//! - `protocol/`: the state file's contents (`state.rs`), the steps on a queue (`queue.rs`), the
//!   one wait loop of every kind (`wait.rs`), elections (`election.rs`);
//! - `wake.rs` (inotify), `look.rs` (the waiters' shared read), `renew.rs` (`renew_many`), `cleanup.rs` (an entry given up on),
//!   `listing.rs` (`inspect`, `list`), `guarded.rs` (guarded writes: the data store in `.data/`,
//!   written in a transaction on the guard's lock while its entry holds), `backend.rs`
//!   (`impl LockBackend`).

#![warn(missing_docs)]

mod backend;
mod cleanup;
mod config;
mod conn;
mod error;
mod guarded;
mod layout;
mod listing;
mod look;
mod private_dir;
mod protocol;
mod random;
mod renew;
mod safe_open;
mod wake;

pub use backend::FileBackend;
pub use config::{default_dir, OPTIONS};

use locksmith_core::driver::{BackendUrl, Connecting, Descriptor, TtlScope};
use locksmith_core::{Locker, Result};

/// This backend in the registry of `locksmith::connect`.
pub static DESCRIPTOR: Descriptor = Descriptor {
    name: "file",
    schemes: &["file"],
    feature: Some("file"),
    options: OPTIONS,
    ttl: TtlScope::PerLock,
    connect: connect_boxed,
};

fn connect_boxed(url: &BackendUrl) -> Connecting<'_> {
    Box::pin(connect(url))
}

/// Opens the lock directory of `url` (see the [crate docs](crate)) and returns a [`Locker`] over
/// it, as one process of the machine.
///
/// # Errors
///
/// [`locksmith_core::LockError::InvalidUrl`] for a bad URL, [`locksmith_core::LockError::Denied`] when the
/// process may not write the directory, [`locksmith_core::LockError::Unavailable`] for other
/// file-system failures.
pub async fn connect(url: &BackendUrl) -> Result<Locker> {
    Ok(Locker::new(FileBackend::connect(url)?))
}

/// `file://` and the [`default_dir`]: the URL `locksmith` uses when given none.
pub fn default_url() -> String {
    format!("file://{}", default_dir().display())
}
