//! The "connection" of a file backend: the directory, this locker's liveness file in it and its
//! heartbeat (`owner.rs`), the leases it holds, transactions on a lock's state file (`txn.rs`),
//! and the removal of idle locks' files (`prune.rs`, run now and then by every locker:
//! `auto_prune.rs`).

mod auto_prune;
mod cache;
mod kept;
mod owner;
mod prune;
mod record;
mod txn;

use std::collections::HashMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use locksmith_core::driver::fast_hash::FastBuildHasher;
use locksmith_core::{LockError, Result};
use tokio::time::Instant;

use crate::error::io_error;
use crate::layout::{LockFile, OWNERS_DIR};
use crate::protocol::state::{Liveness, Now, Text};
use crate::wake::{Changes, Hub};
pub(crate) use auto_prune::{keep_pruning, EVERY as PRUNE_EVERY, IDLE as PRUNE_IDLE};
use owner::Owner;
pub(crate) use prune::prune;

/// One locker's view of the lock directory.
#[derive(Debug)]
pub(crate) struct Dir {
    /// The directory, canonical.
    pub path: PathBuf,
    /// `<path>/.owners`.
    owners: PathBuf,
    /// This locker's liveness file; `None` once shut down.
    owner: Mutex<Option<Owner>>,
    /// Its id (kept after shutdown, to recognise this locker's entries).
    pub owner_id: Text,
    /// This process, as entries record it.
    pub pid: u32,
    /// This host's name.
    pub host: Text,
    /// This boot's id.
    pub boot: Text,
    /// The ids of this locker's queue entries.
    pub entry_ids: crate::random::Ids,
    /// Wake-ups from the kernel for this directory.
    pub hub: Arc<Hub>,
    /// Set by `shutdown`.
    closed: AtomicBool,
    /// The last heartbeat written (`CLOCK_BOOTTIME` ns).
    beat_ns: AtomicU64,
    /// The leases this locker holds, by entry id: what a heartbeat must not keep alive once their
    /// guard stopped renewing them (see [`Dir::beat`]).
    held: Mutex<HashMap<String, HeldLease, FastBuildHasher>>,
    /// Whether a step that hands out a token syncs it to disk (the URL's `sync=`).
    sync: bool,
    /// The lock and state files kept open between steps.
    kept: Mutex<kept::Kept>,
    /// The states of locks this process stepped on, shared by its lockers of the directory.
    cache: Arc<cache::StateCache>,
    /// How many times a state was read without its lock ([`Dir::read`]): tests of the looks.
    #[cfg(test)]
    pub reads: AtomicU64,
}

impl Dir {
    /// Opens (creating it if needed, mode 0775 less the umask) the lock directory `path` and
    /// starts this locker's liveness there; `sync` says whether a step that hands out a fencing
    /// token syncs it to disk. [`LockError::Denied`] when the process may not write there.
    pub fn open(path: &Path, sync: bool) -> Result<Dir> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o775)
            .create(path.join(OWNERS_DIR))
            .map_err(|e| io_error("cannot create the lock directory", path, e))?;
        let path = path
            .canonicalize()
            .map_err(|e| io_error("cannot open the lock directory", path, e))?;
        let owners = path.join(OWNERS_DIR);
        // Liveness files are created in it: a link planted there is not followed.
        if !std::fs::symlink_metadata(&owners).is_ok_and(|m| m.is_dir()) {
            return Err(LockError::Denied(format!(
                "{} is not a directory (a symbolic link?): locksmith does not follow links in its lock directory; remove it",
                owners.display()
            )));
        }
        let hub = Hub::for_dir(&path)?;
        reap_dead_owners(&owners, &hub);
        let beat = Now::read().boot_ns;
        let owner = Owner::create(&owners, beat)?;
        hub.local_locker(&owner.id, true);
        let cache = cache::StateCache::for_dir(&path);
        Ok(Dir {
            beat_ns: AtomicU64::new(beat),
            held: Mutex::default(),
            hub,
            owner_id: owner.id.as_str().into(),
            owner: Mutex::new(Some(owner)),
            owners,
            path,
            pid: std::process::id(),
            host: host_name().into(),
            boot: boot_id().into(),
            entry_ids: crate::random::Ids::new(),
            closed: AtomicBool::new(false),
            sync,
            kept: Mutex::default(),
            cache,
            #[cfg(test)]
            reads: AtomicU64::new(0),
        })
    }

    /// Whether writes that must survive a power cut are synced (the URL's `sync=`).
    pub fn syncs(&self) -> bool {
        self.sync
    }

    /// [`LockError::Closed`] once [`Dir::close`] ran.
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(LockError::Closed);
        }
        Ok(())
    }

    /// Ends this locker's liveness: its entries are dead to every process from now on.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.hub.local_locker(&self.owner_id, false);
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).close();
        drop(self.owner.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    /// Whether the locker `owner` is alive (this one: until closed), and its last heartbeat, or
    /// (unless `fresh`) the heartbeat it had when this process last found it alive, if nothing
    /// since says it ended (see `Hub::remembered`). `reap` removes a dead owner's liveness file.
    fn liveness(&self, owner: &str, reap: bool, fresh: bool) -> Liveness {
        if *owner == *self.owner_id {
            return match self.closed.load(Ordering::Acquire) {
                true => Liveness::Dead,
                false => Liveness::Beat(self.beat_ns.load(Ordering::Acquire)),
            };
        }
        if !fresh {
            if let Some(beat) = self.hub.remembered(owner) {
                return Liveness::Beat(beat);
            }
        }
        check_owner(&self.owners, &self.hub, owner, reap)
    }

    /// Writes a heartbeat: every entry of this locker lives for its TTL from now on. Returns the
    /// held leases whose guard has not renewed them for their TTL (abandoned: the heartbeat would
    /// keep them alive for good), which the caller removes.
    ///
    /// A held lease that had expired under the previous heartbeat by the time this one was
    /// written may have been dropped by another process meanwhile (one that read the old
    /// heartbeat), even though its entry is still in the file: it is marked lost, and its next
    /// renewal says `NotHeld`.
    pub fn beat(&self) -> Result<Vec<(String, LockFile)>> {
        self.keep_owner()?;
        let previous = {
            let owner = self.owner.lock().unwrap_or_else(|e| e.into_inner());
            let owner = owner.as_ref().ok_or(LockError::Closed)?;
            let now = Now::read().boot_ns;
            owner.beat(now)?;
            self.beat_ns.swap(now, Ordering::AcqRel)
        };
        let written = Now::read().boot_ns;
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for h in held.values_mut() {
            let expired_at = h.since_ns.max(previous).saturating_add(duration_ns(h.ttl));
            h.lost |= expired_at <= written;
        }
        let abandoned: Vec<String> = held
            .iter()
            .filter(|(_, h)| h.renewed + h.ttl < now)
            .map(|(id, _)| id.clone())
            .collect();
        Ok(abandoned
            .into_iter()
            .filter_map(|id| held.remove(&id).map(|h| (id, LockFile::clone(&h.file))))
            .collect())
    }

    /// Makes this locker's liveness file again if it was removed behind its back (see
    /// [`Owner::removed`]), before each step and heartbeat: until then every other process finds
    /// this locker dead, and would take a lock it is granted. The held leases' state files are
    /// read at their next renewal, which tells those another process took meanwhile that they
    /// are lost.
    pub fn keep_owner(&self) -> Result<()> {
        let made_again = {
            let mut owner = self.owner.lock().unwrap_or_else(|e| e.into_inner());
            match owner.as_mut() {
                Some(owner) if owner.removed() => {
                    tracing::warn!(owner = %owner.id, "file backend: this locker's liveness file was removed behind its back; made again");
                    owner.make_again(self.beat_ns.load(Ordering::Acquire))?;
                    true
                }
                _ => false,
            }
        };
        if made_again {
            for h in self.held.lock().unwrap_or_else(|e| e.into_inner()).values_mut() {
                h.checked = None;
            }
        }
        Ok(())
    }

    /// Records a lease granted to this locker: entry `id` of `file`, granted at `since_ns`
    /// (`CLOCK_BOOTTIME`) by a request sent at `sent`.
    pub fn hold(&self, id: &str, file: &Arc<LockFile>, ttl: Duration, since_ns: u64, sent: Instant) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.insert(
            id.to_owned(),
            HeldLease {
                changes: self.hub.changes(&file.stem),
                checked: None,
                file: file.clone(),
                ttl,
                since_ns,
                renewed: sent,
                lost: false,
            },
        );
    }

    /// What a renewal must look at for the lease of entry `id`: whether this locker still holds
    /// it, and whether its state file may have changed since a renewal last read it (then the
    /// caller reads it: nothing was counted between this call and that read). The first renewal
    /// of a lease always reads.
    pub fn check(&self, id: &str) -> Check {
        let reading = self.hub.reading();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let Some(h) = held.get_mut(id) else {
            return Check::Gone;
        };
        let changes = h.changes.load(Ordering::Acquire);
        if reading && h.checked == Some(changes) {
            return Check::Unchanged;
        }
        h.checked = Some(changes);
        Check::Read(LockFile::clone(&h.file))
    }

    /// Records that the lease of entry `id` was renewed by a heartbeat written after `sent`, or
    /// says why not: it is not held any more, or was marked lost (then it is forgotten here).
    pub fn renewed(&self, id: &str, sent: Instant) -> Renewed {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match held.get_mut(id) {
            Some(h) if !h.lost => {
                h.renewed = sent;
                Renewed::Yes
            }
            Some(_) => held
                .remove(id)
                .map_or(Renewed::NotHeld, |h| Renewed::Lost(LockFile::clone(&h.file))),
            None => Renewed::NotHeld,
        }
    }

    /// The state file of entry `id` could not be read: the next renewal reads it again, whatever
    /// the kernel reports meanwhile.
    pub fn read_again(&self, id: &str) {
        if let Some(h) = self.held.lock().unwrap_or_else(|e| e.into_inner()).get_mut(id) {
            h.checked = None;
        }
    }

    /// Keeps entry `id` of `file`, whose removal failed, for the next heartbeat to remove again
    /// (as a lease its guard stopped renewing: [`Dir::beat`] returns it). Forgotten, its entry
    /// would live on under this locker's heartbeats and hold the lock for nobody.
    pub fn remove_later(&self, id: &str, file: &LockFile) {
        self.hold(id, &Arc::new(file.clone()), Duration::ZERO, 0, Instant::now());
    }

    /// The files of the lock of the lease of entry `id`, if this locker holds it (a release
    /// takes them from there rather than naming them again).
    pub fn held_file(&self, id: &str) -> Option<Arc<LockFile>> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.get(id).map(|h| h.file.clone())
    }

    /// Forgets the lease of entry `id` (released, or lost).
    pub fn forget(&self, id: &str) {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }
}

/// Sets the modification time of `file`, and its access time with `access`, to now. `UTIME_NOW`
/// needs only the right to write, not ownership: the file may be another user's in a shared
/// directory.
pub(crate) fn set_times_to_now(file: &std::fs::File, access: bool) -> rustix::io::Result<()> {
    let at = |now: bool| rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: match now {
            true => rustix::fs::UTIME_NOW,
            false => rustix::fs::UTIME_OMIT,
        },
    };
    let times = rustix::fs::Timestamps {
        last_access: at(access),
        last_modification: at(true),
    };
    rustix::fs::futimens(file, &times)
}

/// A duration in nanoseconds (saturating).
pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What [`Dir::renewed`] found.
#[derive(Debug)]
pub(crate) enum Renewed {
    /// The lease is renewed from the heartbeat just written.
    Yes,
    /// Its TTL passed under the previous heartbeat (the process was paused): forgotten now. Its
    /// entry, of this lock file, must leave the file (see [`Dir::remove_later`]).
    Lost(LockFile),
    /// This locker does not hold it (released meanwhile).
    NotHeld,
}

/// What a renewal must look at for one lease (see [`Dir::check`]).
#[derive(Debug)]
pub(crate) enum Check {
    /// This locker does not hold it any more.
    Gone,
    /// Its state file did not change since it was last read.
    Unchanged,
    /// Its state file must be read.
    Read(LockFile),
}

/// A lease this locker holds.
#[derive(Debug)]
struct HeldLease {
    /// Shared with the request that took it, and with its release.
    file: Arc<LockFile>,
    /// The changes seen to its state file.
    changes: Changes,
    /// The value of `changes` when a renewal last read the state file.
    checked: Option<u64>,
    ttl: Duration,
    /// When it was granted (`CLOCK_BOOTTIME` ns).
    since_ns: u64,
    /// When its last renewal (or its grant) was sent.
    renewed: Instant,
    /// It expired under a heartbeat before one that came too late (see [`Dir::beat`]).
    lost: bool,
}

/// Removes the liveness files of lockers that ended without removing theirs (killed) and that no
/// queue entry names any more (a transaction reaps those it meets): they would pile up. Lockers
/// this process knows alive (`hub`) are not checked: 1,000 lockers opened in one process would
/// otherwise check each other's files 500,000 times. Files that are no liveness file (a locker's
/// temporary `.<id>.tmp`) are left alone.
fn reap_dead_owners(owners: &Path, hub: &Hub) {
    let Ok(files) = std::fs::read_dir(owners) else { return };
    for file in files.flatten() {
        if let Some(id) = file.file_name().to_str().filter(|id| owner::is_owner_id(id)) {
            if !hub.known_alive(id) {
                check_owner(owners, hub, id, true);
            }
        }
    }
}

/// Checks the liveness file of locker `id` in `owners` (`reap`: removing it if dead), and
/// remembers in `hub` what it found alive.
fn check_owner(owners: &Path, hub: &Hub, id: &str, reap: bool) -> Liveness {
    let events = hub.owner_events();
    let verdict = owner::liveness(owners, id, reap);
    if let Liveness::Beat(beat) = verdict {
        hub.found_alive(id, beat, events);
    }
    verdict
}

/// This host's name (what `inspect` shows beside the pid).
fn host_name() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// This boot's id: entries written in another boot are dead. Empty where the kernel has none or
/// this process cannot read it (then a reboot is told by the liveness files alone, which no
/// process holds after it; see `State::prune`).
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}
