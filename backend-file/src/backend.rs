//! `impl LockBackend` for the file backend: each method calls its step.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use locksmith_core::driver::{async_trait, BackendUrl, GuardedWrite, Lease, LockBackend, LockName, LockRequest};
use locksmith_core::{Family, Leader, LeaderWatch, ListedLock, LockError, LockInfo, PruneReport, Result};

use crate::config::Config;
use crate::conn::Dir;
use crate::error::{join_error, may_pass};
use crate::layout::LockFile;
use crate::protocol::state::entry_id;
use crate::protocol::{election, queue, wait};
use crate::{guarded, listing, private_dir, renew};

/// Locks in a directory shared by the processes of one machine (see the [crate docs](crate)).
/// Clones share one locker's liveness; give each [`locksmith_core::Locker`] its own backend (its own
/// [`FileBackend::connect`]) to model separate processes.
#[derive(Clone, Debug)]
pub struct FileBackend {
    dir: Arc<Dir>,
    config: Arc<Config>,
}

impl FileBackend {
    /// Opens the directory of a `file://` URL (creating it if needed). Errors:
    /// [`LockError::InvalidUrl`] for a bad URL or a directory that can never be one (a path
    /// through a file, a name too long), [`LockError::Denied`] when the process may not
    /// write the directory (or it is the [`crate::default_dir`] and not this user's own),
    /// [`LockError::Unavailable`] for other file-system failures.
    pub fn connect(url: &BackendUrl) -> Result<FileBackend> {
        let config = Config::parse(url)?;
        crate::config::check_dir(url, &config.dir)?;
        if config.private {
            private_dir::prepare(&config.dir)?;
        }
        let dir = Arc::new(Dir::open(&config.dir, config.sync)?);
        crate::conn::keep_pruning(&dir, crate::conn::PRUNE_EVERY, crate::conn::PRUNE_IDLE);
        Ok(FileBackend {
            dir,
            config: Arc::new(config),
        })
    }

    /// Starts more automatic passes of pruning for this locker than those every locker runs in a
    /// Tokio runtime: one whenever the directory was last pruned `every` ago, removing the files
    /// of locks idle for `idle` (tests of the automatic passes). They stop when the locker is
    /// shut down or dropped.
    #[doc(hidden)]
    pub fn keep_pruning(&self, every: Duration, idle: Duration) {
        crate::conn::keep_pruning(&self.dir, every, idle);
    }

    /// The lock directory (canonical).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir.path
    }

    /// The state file of the lock `name` in `family`: where its holders and waiters are (what an
    /// operator would look at, or remove by hand).
    pub fn state_path(&self, family: Family, name: &LockName) -> PathBuf {
        LockFile::of(family, name).state_path(&self.dir.path)
    }

    /// The JSON of the state of `name` in `family` as it is on disk (its newest whole frame, see
    /// `conn/record.rs`), `None` if it has no state file. Written back as the whole file, it is
    /// read as that state (the JSON-only format 1): for tests and for repairs by hand.
    ///
    /// # Errors
    ///
    /// What reading the file can fail with.
    #[doc(hidden)]
    pub fn state_json(&self, family: Family, name: &LockName) -> Result<Option<String>> {
        self.dir.state_json(&LockFile::of(family, name))
    }

    /// The entries in the state file of `name` in `family`, as `holder:<holder id>` or
    /// `waiter:<holder id>`, dead ones included (what is on disk now, for tests and operators).
    ///
    /// # Errors
    ///
    /// What reading the file can fail with.
    #[doc(hidden)] // a test hook: operators read a lock with `Locker::inspect`
    pub fn entries(&self, family: Family, name: &LockName) -> Result<Vec<String>> {
        let state = self.dir.read_raw(&LockFile::of(family, name))?;
        Ok(state
            .entries
            .iter()
            .map(|e| match e.grant {
                Some(_) => format!("holder:{}", e.holder_id()),
                None => format!("waiter:{}", e.holder_id()),
            })
            .collect())
    }
}

#[async_trait]
impl LockBackend for FileBackend {
    fn kind(&self) -> &'static str {
        "file"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        wait::try_acquire(&self.dir, req).await
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        wait::acquire(&self.dir, req, deadline).await
    }

    /// # Cancel safety
    ///
    /// Its one step runs to its end, within the first poll when the lock file is free, else in
    /// a blocking thread, whether or not the future is polled again; a lease whose release was
    /// dropped before it forgot the lease is removed again by the heartbeat a TTL later (finding
    /// it gone: harmless).
    async fn release(&self, lease: &Lease) -> Result<()> {
        let id = entry_id(&lease.holder_id).to_owned();
        // The lease's own files if this locker holds it (it may have been lost meanwhile).
        let family = lease.kind.family();
        let file = self
            .dir
            .held_file(&id)
            .filter(|f| f.is_of(family, &lease.name))
            .unwrap_or_else(|| Arc::new(LockFile::of(family, &lease.name)));
        let dir = self.dir.clone();
        let leaving = id.clone();
        let leave = move |state: &mut crate::protocol::state::State, _| Ok(queue::leave(state, &leaving));
        let left = match dir.leave_if_free(&file, leave) {
            Ok(Ok(left)) => Ok(left),
            Ok(Err(leave)) => tokio::task::spawn_blocking(move || dir.transact(&file, leave))
                .await
                .map_err(join_error)
                .and_then(|left| left),
            Err(e) => Err(e),
        };
        // Forgotten only once its entry left the file (or the file is not one to retry on): a
        // release that failed to write leaves the lease to the heartbeat, which removes it a TTL
        // later (a retry of the release may come first). Forgotten before, its entry would live
        // on under this locker's heartbeats.
        if !left.as_ref().is_err_and(may_pass) {
            self.dir.forget(&id);
        }
        if left? {
            Ok(())
        } else {
            Err(LockError::not_held(lease.name.as_str()))
        }
    }

    /// The lease's entry checked and the write applied in one transaction on its lock, under
    /// its lock file's `flock` (see `guarded.rs`).
    ///
    /// # Cancel safety
    ///
    /// The step runs to its end in a blocking thread: dropped, the write may or may not have
    /// landed, and if it did, it landed while the lease held.
    async fn write_guarded(&self, lease: &Lease, write: &GuardedWrite) -> Result<bool> {
        guarded::write(&self.dir, &self.config.dir, lease, write).await
    }

    /// A plain read of `key` in the directory's data store (`.data/`), without any `flock`.
    async fn read_key(&self, key: &str) -> Result<Option<Vec<u8>>> {
        guarded::read(&self.dir, key).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        renew::renew_many(&self.dir, leases).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        listing::inspect(&self.dir, name)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListedLock>> {
        listing::list(&self.dir, prefix)
    }

    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        election::leader(&self.dir, name)
    }

    async fn observe(&self, name: &LockName) -> Result<LeaderWatch> {
        election::observe(&self.dir, name)
    }

    /// Ends this locker's liveness: whatever of it is still in a queue is dead to every process.
    async fn shutdown(&self) -> Result<()> {
        self.dir.close();
        Ok(())
    }

    /// Removes the files of idle locks and dead lockers' liveness files, in passes of at most
    /// 100 locks (see the [crate docs](crate#idle-locks)).
    async fn prune(&self, idle: Duration, dry_run: bool) -> Result<PruneReport> {
        crate::conn::prune(&self.dir, idle, dry_run).await
    }

    fn default_ttl(&self) -> Option<Duration> {
        self.config.ttl
    }

    fn request_timeout(&self) -> Duration {
        self.config.request_timeout
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use locksmith_core::Locker;

    use super::*;

    /// A hand-over between two lockers of one process takes the grant from the releasing step
    /// (`Hub::granted`): the waiter, woken, holds without reading the state file, which on a
    /// CPU woken from idle costs a hand-over tens of microseconds. (Before, its look read the
    /// state file once per hand-over: 20 reads in 20 rounds.) Also when the kernel's event of
    /// the write wakes the waiter before the step kept the grant (`Hub::handing_over`): with
    /// the other tests of the crate beside it, that was 5 hand-overs in 20.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hand_over_within_the_process_reads_no_state_file() {
        const ROUNDS: u64 = 20;
        let mut reads = 0;
        let path = std::env::temp_dir().join(format!("locksmith-file-handover-{:016x}", rand::random::<u64>()));
        let url = BackendUrl::parse(&format!("file://{}", path.display())).unwrap();
        let holder = Locker::new(FileBackend::connect(&url).unwrap());
        let waiting = FileBackend::connect(&url).unwrap();
        let waiter_dir = waiting.dir.clone();
        let waiter = Locker::new(waiting);
        for round in 0..ROUNDS {
            let name = format!("handover-{round}");
            let held = holder.lock(&name).acquire().await.unwrap();
            let task = tokio::spawn({
                let (waiter, name) = (waiter.clone(), name.clone());
                async move { waiter.lock(name).acquire().await }
            });
            // Until the waiter has joined and looked (its first look reads the file).
            let file = LockFile::of(Family::Mutex, &LockName::new(&name).unwrap());
            while waiter_dir.read_raw(&file).unwrap().entries.len() < 2 || waiter_dir.reads.load(Ordering::Acquire) == 0
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            let before = waiter_dir.reads.load(Ordering::Acquire);
            held.release().await.unwrap();
            let guard = tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("the waiter holds")
                .unwrap()
                .unwrap();
            reads += waiter_dir.reads.load(Ordering::Acquire) - before;
            guard.release().await.unwrap();
            waiter_dir.reads.store(0, Ordering::Release);
        }
        holder.shutdown().await.unwrap();
        waiter.shutdown().await.unwrap();
        let _ = std::fs::remove_dir_all(&path);
        assert!(
            reads <= 2,
            "the waiters read the state file {reads} times in {ROUNDS} hand-overs"
        );
    }
}
