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
//! floor) went back. Prunes of the directory take turns on `.pruned.lock`'s `flock`, and set that
//! file's modification time as an automatic pass starts and as a pass that left nothing behind
//! ends: when the directory was last pruned, by any process, which the automatic passes go by
//! (`auto_prune.rs`). Neither file is a lock's (stems never start with `.`).

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rustix::fs::{flock, FlockOperation};
use rustix::io::Errno;

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
/// Whose `flock` a prune holds (one prune of the directory at a time), and whose modification
/// time is when the directory was last pruned ([`Dir::last_pass`]).
const PRUNING: &str = ".pruned.lock";

/// Who asked for a pass, which sets how it takes its turn and how much it looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `Locker::prune`: waits for a pass of another process to end, and looks at every lock.
    OnDemand,
    /// A locker's own pass (`auto_prune.rs`): gives up if another pass runs (that one does the
    /// work), and looks at no more than [`AUTO_LOOKS`] locks, from a random one on, so that it
    /// costs a process that opens a directory of many thousand locks milliseconds, not the
    /// whole directory.
    Automatic,
}

/// The most locks an automatic pass looks at (each two `statx`, about 2 µs): a random window of
/// a larger directory, a different one each pass.
pub(crate) const AUTO_LOOKS: usize = 4000;

/// What a pass did.
#[derive(Debug)]
pub(crate) enum Pass {
    /// It ran; `full` if it stopped at its limit (more may be left).
    Ran { report: PruneReport, full: bool },
    /// Another pass held the turn ([`Kind::Automatic`] only).
    Skipped,
}

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

    /// When this directory was last pruned, by any process: the start of its last automatic pass
    /// or the end of its last pass that left nothing behind (`None`: never, or unknown).
    pub fn last_pass(&self) -> Option<SystemTime> {
        std::fs::symlink_metadata(self.path.join(PRUNING))
            .and_then(|m| m.modified())
            .ok()
    }

    /// One pass of pruning: removes the files of at most `limit` locks that nobody holds or waits
    /// for and that no step touched for `idle` (the later of the lock file's times, which every
    /// step sets, and the state file's), and the liveness files of dead lockers. With `dry_run`,
    /// only counts them (their dead entries and lockers left as they are). An automatic pass
    /// records its start as the directory's last pass, and a pass that did not stop at `limit`
    /// (and was no dry run) its end. Blocking: call it from a blocking thread.
    pub fn prune(&self, idle: Duration, dry_run: bool, limit: usize, kind: Kind) -> Result<Pass> {
        self.check_open()?;
        let pruning = self.path.join(PRUNING);
        let turn_file = safe_open::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o664)
            .open(&pruning)
            .map_err(|e| open_error("cannot open the prune's lock file", &pruning, e))?;
        let _ = safe_open::check_regular(&turn_file, &pruning)?;
        let (how, looks) = match kind {
            Kind::OnDemand => (FlockOperation::LockExclusive, usize::MAX),
            Kind::Automatic => (FlockOperation::NonBlockingLockExclusive, AUTO_LOOKS),
        };
        match flock(&turn_file, how) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) if kind == Kind::Automatic => return Ok(Pass::Skipped),
            Err(e) => return Err(errno_error("cannot lock", &pruning, e)),
        }
        if kind == Kind::Automatic {
            // Claimed now: if this process ends before the pass does (a `locksmith run` of
            // `true` in a directory of many thousand locks), the next process to open the
            // directory does not start it again at once.
            stamp(&turn_file, &pruning);
        }
        let (report, full) = self.pass(idle, dry_run, limit, looks)?;
        if !dry_run && !full {
            stamp(&turn_file, &pruning);
        }
        Ok(Pass::Ran { report, full })
    }

    /// The work of [`Dir::prune`], with its turn held: looks at no more than `looks` locks (from
    /// a random one on, if there are more).
    fn pass(&self, idle: Duration, dry_run: bool, limit: usize, looks: usize) -> Result<(PruneReport, bool)> {
        let mut stems = Vec::new();
        let files = std::fs::read_dir(&self.path).map_err(|e| io_error("cannot list", &self.path, e))?;
        for file in files {
            let file = file.map_err(|e| io_error("cannot list", &self.path, e))?;
            if let Some(name) = file.file_name().to_str() {
                if let Some(stem) = stem_of_state_file(name).or_else(|| stem_of_lock_file(name)) {
                    stems.push(stem.to_owned());
                }
            }
        }
        // (A lock's two files give its stem twice.)
        stems.sort_unstable();
        stems.dedup();
        let first = match stems.len() > looks {
            true => (crate::random::u64() % stems.len() as u64) as usize,
            false => 0,
        };
        let window = stems.iter().cycle().skip(first).take(stems.len().min(looks));
        let now = SystemTime::now();
        // The locks to remove, each with its lock file locked, and the largest token of them.
        let mut taken: Vec<(LockFile, Locked)> = Vec::new();
        let mut highest = 0;
        let mut full = false;
        for stem in window {
            if taken.len() >= limit {
                full = true;
                break;
            }
            let file = LockFile::of_stem(stem);
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
                if id != &*self.owner_id && matches!(check_owner(&self.owners, &self.hub, id, !dry_run), Liveness::Dead)
                {
                    dead += 1;
                }
            }
        }
        dead
    }
}

/// Sets the modification time of `.pruned.lock` (`turn`, at `path`) to now: when the directory
/// was last pruned, which the automatic passes of every process go by. A failure only logs: the
/// next pass then comes sooner.
fn stamp(turn: &File, path: &Path) {
    if let Err(e) = super::set_times_to_now(turn, false) {
        tracing::debug!(path = %path.display(), error = %e, "file backend: cannot record a pass of pruning");
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

/// The most locks one pass removes.
pub(crate) const BATCH: usize = 100;

/// `Locker::prune`: passes until one stops short of [`BATCH`] (with `dry_run`: the counts of
/// one look at every lock). Waits for a pass of another process to end first.
pub(crate) async fn prune(dir: &std::sync::Arc<Dir>, idle: Duration, dry_run: bool) -> Result<PruneReport> {
    let dir = dir.clone();
    let passes = move || -> Result<PruneReport> {
        let limit = if dry_run { usize::MAX } else { BATCH };
        let mut report = PruneReport::empty(dry_run);
        loop {
            // (A pass that waits for its turn is never skipped.)
            let Pass::Ran { report: pass, full } = dir.prune(idle, dry_run, limit, Kind::OnDemand)? else {
                return Ok(report);
            };
            report = report + pass;
            if dry_run || !full || pass.locks == 0 {
                return Ok(report);
            }
        }
    };
    tokio::task::spawn_blocking(passes)
        .await
        .map_err(crate::error::join_error)?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir() -> Dir {
        let path = std::env::temp_dir().join(format!("locksmith-file-prune-{:016x}", rand::random::<u64>()));
        Dir::open(&path, false).unwrap()
    }

    /// An automatic pass leaves the work to a pass that holds the turn (another process's), and
    /// does not stamp the directory; a pass on demand waits for the turn and runs.
    #[test]
    fn an_automatic_pass_leaves_a_running_pass_alone() {
        let dir = temp_dir();
        let turn = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.path.join(PRUNING))
            .unwrap();
        let long_ago = SystemTime::now() - Duration::from_secs(3600);
        turn.set_modified(long_ago).unwrap();
        flock(&turn, FlockOperation::LockExclusive).unwrap();
        let pass = dir.prune(Duration::ZERO, false, BATCH, Kind::Automatic).unwrap();
        assert!(matches!(pass, Pass::Skipped), "{pass:?}");
        assert_eq!(dir.last_pass(), Some(long_ago), "a skipped pass stamped the directory");
        let on_demand = std::thread::spawn({
            let path = dir.path.clone();
            move || {
                let dir = Dir::open(&path, false).unwrap();
                dir.prune(Duration::ZERO, false, BATCH, Kind::OnDemand)
                    .map(|pass| format!("{pass:?}"))
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!on_demand.is_finished(), "a pass on demand ran beside another");
        flock(&turn, FlockOperation::Unlock).unwrap();
        let pass = on_demand.join().unwrap().unwrap();
        assert!(pass.starts_with("Ran"), "{pass}");
        assert!(dir.last_pass() > Some(long_ago));
        let _ = std::fs::remove_dir_all(&dir.path);
    }

    /// An automatic pass stamps the directory as it starts, so that a process ending before its
    /// pass does (a `locksmith run` of `true` in a large directory) does not leave the directory
    /// due for every process after it; a pass that stopped at its limit is not done, and the
    /// stamp is its start's.
    #[test]
    fn an_automatic_pass_claims_the_directory_as_it_starts() {
        let dir = temp_dir();
        for i in 0..3 {
            let file = LockFile::of_stem(&format!("idle-{i}"));
            std::fs::write(file.lock_path(&dir.path), b"").unwrap();
        }
        let turn = std::fs::File::create(dir.path.join(PRUNING)).unwrap();
        turn.set_modified(SystemTime::now() - Duration::from_secs(3600))
            .unwrap();
        // (File times come from the kernel's coarse clock, a tick behind.)
        let before = SystemTime::now() - Duration::from_secs(1);
        let pass = dir.prune(Duration::ZERO, false, 2, Kind::Automatic).unwrap();
        assert!(matches!(pass, Pass::Ran { full: true, .. }), "{pass:?}");
        let claimed = dir.last_pass().unwrap();
        assert!(claimed >= before, "{claimed:?} {before:?}");
        let pass = dir.prune(Duration::ZERO, false, 2, Kind::Automatic).unwrap();
        assert!(
            matches!(pass, Pass::Ran { full: false, ref report } if report.locks == 1),
            "{pass:?}"
        );
        let _ = std::fs::remove_dir_all(&dir.path);
    }
}
