//! Pruning the lock directory: the files of a lock that nobody holds or waits for and that no step
//! touched for the idle time (its `<stem>.lock`, `<stem>.state` and a leftover `.<stem>.tmp`)
//! are removed, and the liveness files of dead lockers. A held or waited-for lock is never
//! touched, and a lock used again goes on above every token it handed out.
//!
//! The unlink race (a process that opened a lock file just before it is removed, and locks it
//! just after) is closed on both sides: a prune removes a lock's files only while it holds the
//! lock file's `flock` (taken without waiting: a lock in use is skipped), and every step, after
//! it took a lock file's `flock`, checks that the path still names that file, and opens the new
//! one otherwise (`txn.rs`, `Dir::lock_path`).
//!
//! The fencing tokens of removed locks are kept in `.pruned`, the high-water mark (the largest
//! token removed, written and synced before any lock file goes), which a lock without a state
//! file starts from ([`Dir::pruned_mark`]): tokens go on increasing even if the wall clock (their
//! floor) went back. Prunes of the directory take turns on `.pruned.lock`'s `flock`. Neither file
//! is a lock's (stems never start with `.`).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rustix::fs::{flock, FlockOperation};

use locksmith_core::{PruneReport, Result};

use super::txn::{check_still_named, Loaded, Locked};
use super::{check_owner, Dir};
use crate::error::{corrupt, errno_error, io_error, open_error};
use crate::layout::{stem_of_lock_file, stem_of_state_file, LockFile, OWNERS_DIR};
use crate::protocol::state::{Liveness, Now};
use crate::safe_open;

/// The high-water mark of pruned fencing tokens: a decimal number.
const MARK: &str = ".pruned";
/// Where the next mark is written before it is renamed over the last.
const MARK_TEMP: &str = ".pruned.tmp";
/// Whose `flock` a prune holds: one prune of the directory at a time.
const PRUNING: &str = ".pruned.lock";

impl Dir {
    /// The high-water mark of the tokens of pruned locks (0 if nothing was ever pruned): a lock
    /// whose state file is missing starts from it (`txn.rs`).
    pub fn pruned_mark(&self) -> Result<u64> {
        let path = self.path.join(MARK);
        let mut file = match safe_open::options().read(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(open_error("cannot read the mark of pruned tokens", &path, e)),
        };
        let _ = safe_open::check_regular(&file, &path)?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|e| io_error("cannot read the mark of pruned tokens", &path, e))?;
        text.trim().parse().map_err(|e| corrupt(&path, e))
    }

    /// One pass of pruning: removes the files of at most `limit` locks that nobody holds or waits
    /// for and that no step touched for `idle` (the later of the lock file's times, which every
    /// step sets, and the state file's), and the liveness files of dead lockers. With `dry_run`,
    /// only counts them (their dead entries and lockers left as they are). Also answers whether
    /// it stopped at `limit` (more may be left). Blocking: call it from a blocking thread.
    pub fn prune(&self, idle: Duration, dry_run: bool, limit: usize) -> Result<(PruneReport, bool)> {
        self.check_open()?;
        let pruning = self.path.join(PRUNING);
        let turn = safe_open::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o664)
            .open(&pruning)
            .map_err(|e| open_error("cannot open the prune's lock file", &pruning, e))?;
        let _ = safe_open::check_regular(&turn, &pruning)?;
        flock(&turn, FlockOperation::LockExclusive).map_err(|e| errno_error("cannot lock", &pruning, e))?;

        let mut stems = BTreeSet::new();
        let files = std::fs::read_dir(&self.path).map_err(|e| io_error("cannot list", &self.path, e))?;
        for file in files {
            let file = file.map_err(|e| io_error("cannot list", &self.path, e))?;
            if let Some(name) = file.file_name().to_str() {
                if let Some(stem) = stem_of_state_file(name).or_else(|| stem_of_lock_file(name)) {
                    stems.insert(stem.to_owned());
                }
            }
        }
        let now = SystemTime::now();
        // The locks to remove, each with its lock file locked, and the largest token of them.
        let mut taken: Vec<(LockFile, Locked)> = Vec::new();
        let mut highest = 0;
        let mut full = false;
        for stem in stems {
            if taken.len() >= limit {
                full = true;
                break;
            }
            let file = LockFile::of_stem(&stem);
            let (lock_path, state_path) = (file.lock_path(&self.path), file.state_path(&self.path));
            if !idle_for(&[&lock_path, &state_path], now, idle) {
                continue;
            }
            // (A lock file removed by hand is made again here: its times are then not a step's.)
            let lock_file_was_there = std::fs::symlink_metadata(&lock_path).is_ok();
            let Some(locked) = self.lock_path(&lock_path, false)? else {
                continue; // a step holds it now
            };
            // A step may have run since the look above: look again, under the lock.
            let look_at: &[&Path] = match lock_file_was_there {
                true => &[&lock_path, &state_path],
                false => &[&state_path],
            };
            if !idle_for(look_at, SystemTime::now(), idle) {
                continue;
            }
            let token = match self.open_state(&state_path, None, None, false) {
                Ok(None) => 0,
                Ok(Some(Loaded { mut state, .. })) => {
                    state.prune(&self.boot, Now::read(), |owner, fresh| {
                        self.liveness(owner, !dry_run, fresh)
                    });
                    if !state.entries.is_empty() {
                        continue; // held or waited for
                    }
                    state.last_token
                }
                Err(e) => {
                    tracing::warn!(path = %state_path.display(), error = %e, "file backend: a prune leaves a state file it cannot read");
                    continue;
                }
            };
            highest = highest.max(token);
            taken.push((file, locked));
        }
        let owners = self.prune_owners(dry_run);
        if dry_run {
            return Ok((PruneReport::new(taken.len() as u64, owners, true), full));
        }
        if highest > self.pruned_mark()? {
            self.write_mark(highest)?;
        }
        let mut removed = 0;
        for (file, locked) in taken {
            let lock_path = file.lock_path(&self.path);
            if check_still_named(&locked, &lock_path).is_err() {
                continue;
            }
            let remove = |path: &Path| match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error("cannot remove", path, e)),
                _ => Ok(()),
            };
            // The lock file last: until it goes, every step on the lock waits for this one.
            remove(&file.state_path(&self.path))?;
            remove(&file.temp_path(&self.path))?;
            remove(&lock_path)?;
            self.hub.changed(Some(&file.stem));
            removed += 1;
            drop(locked);
        }
        Ok((PruneReport::new(removed, owners, false), full))
    }

    /// Writes `token` as the high-water mark, durably unless `sync=off` (the file, then the
    /// directory), before any lock file it covers is removed. Called with `.pruned.lock` held.
    fn write_mark(&self, token: u64) -> Result<()> {
        let (temp, path) = (self.path.join(MARK_TEMP), self.path.join(MARK));
        match std::fs::remove_file(&temp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_error("cannot remove the old temporary mark", &temp, e));
            }
            _ => {}
        }
        let write = || -> std::io::Result<()> {
            let mut f = safe_open::options()
                .write(true)
                .create_new(true)
                .mode(0o664)
                .open(&temp)?;
            f.write_all(format!("{token}\n").as_bytes())?;
            if self.sync {
                f.sync_data()?;
            }
            std::fs::rename(&temp, &path)?;
            if self.sync {
                File::open(&self.path)?.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| io_error("cannot write the mark of pruned tokens", &path, e))
    }

    /// Removes (unless `dry_run`) the liveness files of lockers that ended without removing
    /// theirs; how many there are.
    fn prune_owners(&self, dry_run: bool) -> u64 {
        let Ok(files) = std::fs::read_dir(self.path.join(OWNERS_DIR)) else {
            return 0;
        };
        let mut dead = 0;
        for file in files.flatten() {
            if let Some(id) = file.file_name().to_str().filter(|id| super::owner::is_owner_id(id)) {
                if id != self.owner_id && matches!(check_owner(&self.owners, &self.hub, id, !dry_run), Liveness::Dead) {
                    dead += 1;
                }
            }
        }
        dead
    }
}

/// Whether none of the files at `paths` (those that exist) was modified within `idle` before
/// `now`.
fn idle_for(paths: &[&Path], now: SystemTime, idle: Duration) -> bool {
    if idle.is_zero() {
        return true;
    }
    paths.iter().all(
        |path| match std::fs::symlink_metadata(path).and_then(|m| m.modified()) {
            Ok(modified) => now.duration_since(modified).is_ok_and(|age| age >= idle),
            Err(_) => true,
        },
    )
}

/// How long a lock's files must have been left alone before a locker's own passes remove them.
pub(crate) const IDLE: Duration = Duration::from_secs(3600);

/// About how often a locker runs a pass of its own (each time within a half and one and a half
/// of it, at random; the first one no sooner than half of it after opening the directory).
pub(crate) const EVERY: Duration = Duration::from_secs(600);

/// The most locks one pass removes.
pub(crate) const BATCH: usize = 100;

/// `Locker::prune`: passes until one stops short of [`BATCH`] (with `dry_run`: the counts of
/// one look at every lock).
pub(crate) async fn prune(dir: &std::sync::Arc<Dir>, idle: Duration, dry_run: bool) -> Result<PruneReport> {
    let dir = dir.clone();
    let passes = move || -> Result<PruneReport> {
        if dry_run {
            return Ok(dir.prune(idle, true, usize::MAX)?.0);
        }
        let mut report = PruneReport::empty(false);
        loop {
            let (pass, full) = dir.prune(idle, false, BATCH)?;
            report = report + pass;
            if !full || pass.locks == 0 {
                return Ok(report);
            }
        }
    };
    tokio::task::spawn_blocking(passes)
        .await
        .map_err(crate::error::join_error)?
}

/// Starts this locker's own passes (one about every `every`, removing what has been idle for
/// `idle`) in the runtime it is opened in, if any, until it is shut down or dropped. A pass that
/// fails is logged and tried again at the next.
pub(crate) fn keep_pruning(dir: &std::sync::Arc<Dir>, every: Duration, idle: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let dir = std::sync::Arc::downgrade(dir);
    runtime.spawn(async move {
        let mut wait = every / 2 + every.mul_f64(crate::random::unit() / 2.0);
        loop {
            tokio::time::sleep(wait).await;
            wait = every / 2 + every.mul_f64(crate::random::unit());
            let Some(dir) = dir.upgrade() else { return };
            let pass = tokio::task::spawn_blocking(move || dir.prune(idle, false, BATCH)).await;
            match pass.map_err(crate::error::join_error).and_then(|pass| pass) {
                Ok((report, full)) => {
                    if report.locks + report.owners > 0 {
                        tracing::debug!(
                            locks = report.locks,
                            owners = report.owners,
                            "file backend: pruned idle locks"
                        );
                    }
                    if full {
                        wait = Duration::from_secs(1);
                    }
                }
                Err(locksmith_core::LockError::Closed) => return,
                Err(e) => tracing::debug!(error = %e, "file backend: a pass of pruning failed; trying again later"),
            }
        }
    });
}
