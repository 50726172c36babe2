//! Transactions on one lock's state: `flock` the lock file, read the state, drop the dead, run a
//! step, write the state back if it changed (a new file renamed over the old, so readers without
//! the lock always see a whole state), unlock.
//!
//! A step that hands out a fencing token is written durably (the file and the directory are
//! synced before the step's caller learns the token; the URL's `sync=off` skips it), so tokens
//! keep increasing across a crash, a reboot or a power cut. Everything else is only renamed
//! without syncing the directory: after a power cut the rename may be lost, which loses nothing,
//! since every entry of a boot that ended is dead. Its new file's data is still synced before the
//! rename (unless `sync=off`): a file system may put the rename on disk before the data (XFS, ext4
//! with some mount options), and a power cut would then leave an empty state file in place of the
//! durable token record (see [`syncs`]).

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use rustix::fs::{flock, FlockOperation};

use locksmith_core::{LockError, Result};

use super::Dir;

/// How long a `try` polls a lock file that another process holds locked ([`Dir::try_transact`]).
pub(crate) const TRY_FLOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
use crate::error::{corrupt, errno_error, io_error, open_error};
use crate::layout::{LockFile, STATE_SUFFIX};
use crate::protocol::state::{Now, State, FORMAT};
use crate::safe_open;

impl Dir {
    /// Runs `step` on the state of `file` under its lock (blocking: call it from a blocking
    /// thread), and writes back what it changed, also when it fails. A change is counted at once
    /// (`Hub::changed`), before the kernel reports it. This locker's liveness file is made again
    /// first if it was removed behind its back ([`Dir::keep_owner`]).
    pub fn transact<R>(&self, file: &LockFile, step: impl FnOnce(&mut State, Now) -> Result<R>) -> Result<R> {
        self.keep_owner()?;
        let locked = self.lock(file)?;
        self.transact_locked(file, &locked, step)
    }

    /// [`Dir::transact`] for a `try`, which never waits behind another process's `flock` on the
    /// lock file: a step of locksmith's holds it for milliseconds, so the lock file is polled for
    /// at most [`TRY_FLOCK_WAIT`]; `None` if it stayed locked that long (another program that
    /// `flock`s locksmith's file, as `flock(1)` or a lock-file library would, or a process
    /// paused in the middle of its step: either way the lock is not free for a try now).
    pub fn try_transact<R>(
        &self,
        file: &LockFile,
        step: impl FnOnce(&mut State, Now) -> Result<R>,
    ) -> Result<Option<R>> {
        self.keep_owner()?;
        let path = file.lock_path(&self.path);
        let deadline = std::time::Instant::now() + TRY_FLOCK_WAIT;
        let mut pause = std::time::Duration::from_micros(100);
        let locked = loop {
            if let Some(locked) = self.lock_path(&path, false)? {
                break locked;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                tracing::debug!(path = %path.display(), "file backend: the lock file stayed locked by another process; the try answers held");
                return Ok(None);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
        };
        touch(&locked, &path);
        self.transact_locked(file, &locked, step).map(Some)
    }

    /// [`Dir::transact`] with the lock file `locked` already.
    fn transact_locked<R>(
        &self,
        file: &LockFile,
        locked: &File,
        step: impl FnOnce(&mut State, Now) -> Result<R>,
    ) -> Result<R> {
        let now = Now::read();
        let original = self.load(file)?;
        let mut state = match &original {
            Some((state, _)) => state.clone(),
            // A lock without a state file (never used, or pruned: `prune.rs`) goes on above
            // the high-water mark of pruned tokens, read with its lock file locked: a prune
            // raised it before it removed the lock file this step may have waited for.
            None => {
                let mut state = State::new(&file.segment, &self.boot);
                state.last_token = self.pruned_mark()?;
                state
            }
        };
        state.prune(&self.boot, now, |owner, fresh| self.liveness(owner, true, fresh));
        let out = step(&mut state, now);
        let bytes = serde_json::to_vec(&state).map_err(|e| LockError::Protocol(e.to_string()))?;
        let changed = match &original {
            Some((_, old)) => *old != bytes,
            None => !state.entries.is_empty(),
        };
        if changed {
            let token_changed = original.as_ref().is_none_or(|(o, _)| o.last_token != state.last_token);
            let stored = self.store(file, &bytes, syncs(self.sync, token_changed), locked);
            self.hub.changed(Some(&file.stem));
            stored?;
        }
        out
    }

    /// The state of `file` as it is now, without its dead entries, read without the lock (a
    /// look, for waiters deciding whether to take a turn, and for `inspect`, `list`, `leader`).
    pub fn read(&self, file: &LockFile) -> Result<State> {
        let mut state = self.read_raw(file)?;
        state.prune(&self.boot, Now::read(), |owner, fresh| {
            self.liveness(owner, false, fresh)
        });
        Ok(state)
    }

    /// The state of `file` as it is on disk, dead entries included.
    pub fn read_raw(&self, file: &LockFile) -> Result<State> {
        Ok(match self.load(file)? {
            Some((state, _)) => state,
            None => State::new(&file.segment, &self.boot),
        })
    }

    /// The state file of stem `stem` (whatever lock it is), without its dead entries: what `list`
    /// reads. `None` if it went meanwhile.
    pub fn read_stem(&self, stem: &str) -> Result<Option<State>> {
        let path = self.path.join(format!("{stem}{STATE_SUFFIX}"));
        let Some((mut state, _)) = self.load_path(&path, None)? else {
            return Ok(None);
        };
        state.prune(&self.boot, Now::read(), |owner, fresh| {
            self.liveness(owner, false, fresh)
        });
        Ok(Some(state))
    }

    /// The lock file of `file`, locked. The lock file is never replaced by locksmith; if it was
    /// removed by hand while this process waited for it, the new one is locked instead. A
    /// symbolic link in its place is refused, never followed (see `safe_open.rs`).
    ///
    /// Its access and modification times are set to now ([`touch`]): it is never written, and
    /// age-based clean-ups of `/tmp` (`systemd-tmpfiles`, `tmpreaper`) would otherwise remove a
    /// lock file in use once it is old, letting a second process lock a new one while a step
    /// runs (the step then finds it gone, see [`check_still_named`]).
    fn lock(&self, file: &LockFile) -> Result<File> {
        let path = file.lock_path(&self.path);
        let locked = self
            .lock_path(&path, true)?
            .ok_or_else(|| LockError::Protocol("a lock that waits was not taken".into()))?;
        touch(&locked, &path);
        Ok(locked)
    }

    /// The lock file at `path`, locked (`wait`: waiting for it; else `None` if another step
    /// holds it): opened (created if missing), `flock`ed, then checked to be still the file at
    /// `path`, else opened again. A prune (`prune.rs`) removes lock files with their `flock`
    /// held, so a step that opened one before and locks it after finds it gone and opens the
    /// new one.
    pub(super) fn lock_path(&self, path: &Path, wait: bool) -> Result<Option<File>> {
        let operation = match wait {
            true => FlockOperation::LockExclusive,
            false => FlockOperation::NonBlockingLockExclusive,
        };
        loop {
            let f = safe_open::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o664)
                .open(path)
                .map_err(|e| open_error("cannot open the lock file", path, e))?;
            safe_open::check_regular(&f, path)?;
            match flock(&f, operation) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) if !wait => return Ok(None),
                Err(e) => return Err(errno_error("cannot lock", path, e)),
            }
            let held = f.metadata().map_err(|e| io_error("cannot read", path, e))?;
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == held.dev() && m.ino() == held.ino()) {
                return Ok(Some(f));
            }
        }
    }

    /// The state file of `file` and its bytes, `None` if there is none yet.
    fn load(&self, file: &LockFile) -> Result<Option<(State, Vec<u8>)>> {
        self.load_path(&file.state_path(&self.path), Some(&file.segment))
    }

    /// The state file at `path` and its bytes; it must be the state of `segment` if given. A
    /// symbolic link in its place is refused, never followed (it may name `/dev/zero`), and so is
    /// anything but a regular file, never waited on (a FIFO would block the read for good).
    pub(super) fn load_path(&self, path: &Path, segment: Option<&str>) -> Result<Option<(State, Vec<u8>)>> {
        let mut file = match safe_open::options().read(true).open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(open_error("cannot read the state file", path, e)),
        };
        safe_open::check_regular(&file, path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| io_error("cannot read the state file", path, e))?;
        let state: State = serde_json::from_slice(&bytes).map_err(|e| corrupt(path, e))?;
        if state.format != FORMAT {
            return Err(corrupt(
                path,
                format!("format {} (this version reads {FORMAT})", state.format),
            ));
        }
        // The next token must fit, and stay a signed 64-bit number (what fenced stores keep): a
        // counter this high was not written by locksmith, and would wrap below earlier tokens.
        if state.last_token >= i64::MAX.unsigned_abs() {
            return Err(corrupt(
                path,
                format!("fencing counter {} has no room for another token", state.last_token),
            ));
        }
        if segment.is_some_and(|segment| state.segment != segment) {
            return Err(LockError::InvalidName(format!(
                "this lock name's file name ({}) is taken by another name of the same long prefix",
                path.display()
            )));
        }
        Ok(Some((state, bytes)))
    }

    /// Replaces the state file of `file` with `bytes`, written to its temporary file first.
    ///
    /// The temporary file is always a new one (`O_EXCL`, see `safe_open.rs`): whatever is at its
    /// name is removed first (the leftover of a step that crashed, or a link someone planted,
    /// which is removed and never followed). Only a step holding the lock file's `flock` writes
    /// it, so no other locksmith process removes or creates it meanwhile; anyone else who does
    /// makes the step fail.
    ///
    /// The lock file must still be the one `locked` (see [`check_still_named`]), checked before
    /// the temporary file is touched and again just before the rename: otherwise nothing is
    /// renamed, and the step fails.
    fn store(&self, file: &LockFile, bytes: &[u8], syncs: Syncs, locked: &File) -> Result<()> {
        let (temp, path) = (file.temp_path(&self.path), file.state_path(&self.path));
        let lock_path = file.lock_path(&self.path);
        check_still_named(locked, &lock_path)?;
        match std::fs::remove_file(&temp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_error("cannot remove the old temporary state file", &temp, e));
            }
            _ => {}
        }
        let f = safe_open::options()
            .write(true)
            .create_new(true)
            .mode(0o664)
            .open(&temp)
            .map_err(|e| open_error("cannot create the temporary state file", &temp, e))?;
        let write = |mut f: File| -> std::io::Result<()> {
            f.write_all(bytes)?;
            if syncs.file {
                f.sync_data()?;
            }
            Ok(())
        };
        write(f).map_err(|e| io_error("cannot write the state file", &path, e))?;
        check_still_named(locked, &lock_path)?;
        let rename = || -> std::io::Result<()> {
            std::fs::rename(&temp, &path)?;
            if syncs.dir {
                File::open(&self.path)?.sync_all()?;
            }
            Ok(())
        };
        rename().map_err(|e| io_error("cannot write the state file", &path, e))
    }
}

/// `Ok` if the lock file at `path` is still the file `locked` (the same device and inode), whose
/// `flock` the step holds. Otherwise it was removed (or replaced) during the step, by hand or by
/// a clean-up of old files, and another process may be running a step under a new lock file at
/// the same time: this step must write nothing. [`LockError::Unavailable`]: the call may be tried
/// again (it then locks the new lock file). A removal between this check and the rename still
/// goes unseen (a window of microseconds) unless it is locksmith's own prune, which removes a lock
/// file only with its `flock` held; the lock file's times, set at every step, keep age-based
/// cleaners from removing it in the first place.
pub(super) fn check_still_named(locked: &File, path: &Path) -> Result<()> {
    let held = locked.metadata().map_err(|e| io_error("cannot read", path, e))?;
    let named = std::fs::symlink_metadata(path);
    if named.is_ok_and(|m| m.dev() == held.dev() && m.ino() == held.ino()) {
        return Ok(());
    }
    tracing::warn!(path = %path.display(), "file backend: a lock file was removed during a step; the step wrote nothing");
    Err(LockError::Unavailable {
        message: format!(
            "the lock file {} was removed or replaced during a step (by hand, or by a clean-up of \
             old files): nothing was written; try again",
            path.display()
        ),
        source: None,
    })
}

/// Sets the access and modification times of the lock file `locked` (at `path`) to now, so that
/// age-based clean-ups leave a lock file in use alone. `UTIME_NOW` needs only the right to write,
/// which the lock file is opened with (not ownership: it may be another user's in a shared
/// directory). A failure only logs: the step runs anyway, [`check_still_named`] still guards it.
fn touch(locked: &File, path: &Path) {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    let times = rustix::fs::Timestamps {
        last_access: now,
        last_modification: now,
    };
    if let Err(e) = rustix::fs::futimens(locked, &times) {
        tracing::debug!(path = %path.display(), error = %e, "file backend: cannot set the lock file's times");
    }
}

/// The syncs a changed state gets when it is written (see [`syncs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Syncs {
    /// `sync_data` of the new file before it is renamed over the old one.
    file: bool,
    /// `fsync` of the directory after the rename.
    dir: bool,
}

/// The syncs of a changed state: `durable` is the URL's `sync=grant`, `token_changed` whether the
/// step handed out a fencing token (or the state file is new).
///
/// With `durable`, the new file's data is always synced before the rename: the rename replaces a
/// durable token record, and a file system may write the rename before the data, which a power
/// cut would turn into an empty state file (every call failing, the token record gone). Only a
/// step that changed the token waits for the directory too (the rename itself on disk before its
/// caller learns the token); any other step's rename may be lost, which loses nothing.
fn syncs(durable: bool, token_changed: bool) -> Syncs {
    Syncs {
        file: durable,
        dir: durable && token_changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    use locksmith_core::driver::{LockName, Role};
    use locksmith_core::Family;

    use crate::protocol::queue;
    use crate::protocol::state::Entry;

    /// An exclusive entry `id` of `dir`'s locker, with a long TTL.
    fn entry(dir: &Dir, id: &str) -> Entry {
        Entry {
            id: id.into(),
            owner: dir.owner_id.clone(),
            pid: dir.pid,
            host: dir.host.clone(),
            role: Entry::role_text(Role::Exclusive),
            value: String::new(),
            since_ns: 0,
            ttl_ns: 60_000_000_000,
            grant: None,
            expires_ns: 0,
        }
    }

    /// Bug: a lock file removed while a step held its `flock` (an age-based clean-up of `/tmp`:
    /// the lock file is never written) let a second step lock a new lock file and run at the
    /// same time: both granted the lock. The first step finds its lock file gone before it
    /// renames, and fails without writing.
    #[test]
    fn a_step_whose_lock_file_was_removed_meanwhile_writes_nothing() {
        let path = std::env::temp_dir().join(format!("locksmith-file-txn-{:016x}", rand::random::<u64>()));
        let dir = Arc::new(Dir::open(&path, false).unwrap());
        let file = LockFile::of(Family::Mutex, &LockName::new("swept").unwrap());
        let barrier = Arc::new(Barrier::new(2));
        let first = {
            let (dir, file, barrier) = (dir.clone(), file.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mine = entry(&dir, "1");
                dir.transact(&file, |state, now| {
                    barrier.wait();
                    std::thread::sleep(Duration::from_millis(200));
                    queue::try_take(state, mine, now)
                })
            })
        };
        barrier.wait();
        std::fs::remove_file(file.lock_path(&dir.path)).unwrap();
        let second = dir.transact(&file, |state, now| queue::try_take(state, entry(&dir, "2"), now));
        let first = first.join().unwrap();
        let granted = [&first, &second].iter().filter(|r| matches!(r, Ok(Some(_)))).count();
        let holders = dir.read_raw(&file).unwrap().entries.len();
        let _ = std::fs::remove_dir_all(&path);
        assert!(granted <= 1, "two holders: {first:?}, {second:?}");
        assert!(
            matches!(&first, Err(LockError::Unavailable { message, .. }) if message.contains("removed")),
            "{first:?}"
        );
        assert_eq!(holders, 1);
    }

    /// Age-based clean-ups of `/tmp` remove files not written for days: every step sets its lock
    /// file's times to now (the file itself is never written).
    #[test]
    fn a_step_touches_its_lock_file() {
        let path = std::env::temp_dir().join(format!("locksmith-file-txn-{:016x}", rand::random::<u64>()));
        let dir = Dir::open(&path, false).unwrap();
        let file = LockFile::of(Family::Mutex, &LockName::new("old").unwrap());
        dir.transact(&file, |_, _| Ok(())).unwrap();
        let lock_path = file.lock_path(&dir.path);
        let ten_days_ago = std::time::SystemTime::now() - Duration::from_secs(10 * 86_400);
        let times = std::fs::FileTimes::new()
            .set_accessed(ten_days_ago)
            .set_modified(ten_days_ago);
        File::options()
            .write(true)
            .open(&lock_path)
            .unwrap()
            .set_times(times)
            .unwrap();
        dir.transact(&file, |_, _| Ok(())).unwrap();
        let meta = std::fs::metadata(&lock_path).unwrap();
        let _ = std::fs::remove_dir_all(&path);
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3_600);
        assert!(
            meta.modified().unwrap() > hour_ago && meta.accessed().unwrap() > hour_ago,
            "{meta:?}"
        );
    }

    /// Bug: with `sync=grant`, a step that did not change the token renamed an unsynced file over
    /// the durable one (after a power cut: an empty state file, the token record gone).
    #[test]
    fn under_sync_grant_every_step_syncs_the_file_before_the_rename() {
        assert_eq!(syncs(true, false), Syncs { file: true, dir: false });
        assert_eq!(syncs(true, true), Syncs { file: true, dir: true });
        for token_changed in [false, true] {
            assert_eq!(
                syncs(false, token_changed),
                Syncs {
                    file: false,
                    dir: false
                },
                "sync=off"
            );
        }
    }
}
