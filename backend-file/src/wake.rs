//! Wake-ups from the kernel: one inotify instance per directory and process, read by a thread of
//! its own (so that it serves every tokio runtime of the process), never polling.
//!
//! - A state file renamed into place, removed or written in place (`IN_MOVED_TO`, `IN_DELETE`,
//!   `IN_MODIFY` of `<stem>.state`: raised by the write itself, once it is done, and not by a
//!   step that only opened the file and wrote nothing, nor by the lock files) wakes the tasks of this process that wait on that lock,
//!   and counts as a change of that lock for the renewals of this process (see
//!   [`Hub::changes`]): a renewal reads only the state files that changed since it last read
//!   them.
//! - A liveness file closed or removed in `.owners/` (`IN_CLOSE_WRITE`, `IN_DELETE`: a locker
//!   ended, maybe by SIGKILL) wakes every waiting task of this process, since the dead locker's
//!   entries may have been ahead of any of them.
//!
//! - A step of this process that handed a lock over (`queue::hand_over`) wakes that lock's
//!   waiters in this process itself, right after its write (`conn/txn.rs`): the new holder
//!   needs no hop through the thread, and takes its grant from memory ([`Hub::granted`]), not
//!   from a read of the state file. The kernel's event still comes, and wakes them again.
//!
//! The instance is made when something first needs it ([`Hub::start`]): a waiter that found the
//! lock taken, a renewal, an election observed. An uncontended acquire and release, the whole of
//! a short `locksmith run`, never make one: besides the thread, closing an inotify instance
//! waits for the kernel's grace period (`synchronize_srcu`, 10 to 20 ms), which every process
//! that had one pays at its exit. Until then nothing is counted from the kernel
//! ([`Hub::reading`] is false): renewals read their state files and liveness is checked afresh.
//!
//! A task registers (enables its `Notified`) before it reads the state, so a change made after
//! its read always wakes it. The counters are bumped before the tasks are woken, so a woken task
//! that reads them sees the change that woke it (what the waiters' shared read relies on, see
//! `look.rs`).

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use tokio::sync::Notify;

use crate::error::errno_error;
use crate::layout::{stem_of_state_file, OWNERS_DIR};
use crate::protocol::queue::HandedOver;
use crate::protocol::state::Text;
use locksmith_core::driver::fast_hash::FastBuildHasher;
use locksmith_core::Result;

/// At most this many grants are kept for waiters that have not taken them yet (see
/// [`Hub::granted`]); a waiter that finds none reads the state file.
const KEPT_GRANTS: usize = 1024;

/// The wake-ups of one directory in this process.
#[derive(Debug)]
pub(crate) struct Hub {
    /// The directory (canonical).
    dir: PathBuf,
    /// The inotify instance and its two watches, once started.
    watch: Mutex<Option<(Arc<OwnedFd>, [i32; 2])>>,
    /// One `Notify` per lock stem that a task of this process waits on.
    locks: Mutex<HashMap<String, Weak<Notify>, FastBuildHasher>>,
    /// How many times a locker of the directory ended (or the kernel dropped events): the entries
    /// of any lock may have died.
    owner_events: AtomicU64,
    /// The lockers of the directory found alive, with their heartbeat then, until the kernel says
    /// their liveness file was closed or removed (see [`Hub::remembered`]).
    alive: Mutex<HashMap<String, u64, FastBuildHasher>>,
    /// One change counter per lock stem that this process holds (see [`Hub::changes`]).
    changes: Mutex<Counters>,
    /// Whether the thread reads events: not before [`Hub::start`], nor once it stopped.
    reading: AtomicBool,
    /// The grants that steps of this process made to entries of its own lockers, by entry id,
    /// until their waiters take them (see [`Hub::granted`]).
    grants: Mutex<HashMap<Text, HandedOver, FastBuildHasher>>,
    /// The ids of this process's open lockers of the directory.
    lockers: Mutex<HashSet<String, FastBuildHasher>>,
    /// The locks (stems) whose hand-over a step of this process is writing now, and how many
    /// such steps (see [`Hub::handing_over`]).
    handing: Mutex<HashMap<String, usize, FastBuildHasher>>,
}

/// The change counters, and how many lived when dead ones were last dropped (dropping them at
/// every insertion would cost a pass over all of them per lock taken).
#[derive(Debug, Default)]
struct Counters {
    by_stem: HashMap<String, Weak<AtomicU64>, FastBuildHasher>,
    live_at_last_sweep: usize,
}

/// The number of changes seen to one lock's state file, as [`Hub::changes`] hands it out.
pub(crate) type Changes = Arc<AtomicU64>;

impl Hub {
    /// The hub of `dir` (canonical) in this process, started on first use.
    pub fn for_dir(dir: &Path) -> Result<Arc<Hub>> {
        static HUBS: OnceLock<Mutex<HashMap<PathBuf, Weak<Hub>>>> = OnceLock::new();
        let mut hubs = HUBS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(hub) = hubs.get(dir).and_then(Weak::upgrade) {
            return Ok(hub);
        }
        hubs.retain(|_, hub| hub.strong_count() > 0);
        let hub = Arc::new(Hub {
            dir: dir.to_owned(),
            watch: Mutex::default(),
            locks: Mutex::default(),
            owner_events: AtomicU64::new(0),
            alive: Mutex::default(),
            changes: Mutex::default(),
            reading: AtomicBool::new(false),
            grants: Mutex::default(),
            lockers: Mutex::default(),
            handing: Mutex::default(),
        });
        hubs.insert(dir.to_owned(), Arc::downgrade(&hub));
        Ok(hub)
    }

    /// Starts the wake-ups (the inotify instance, its watches and its thread) if they have not
    /// started yet; from then on, a change is counted and wakes its waiters. Everything
    /// remembered or counted before is dropped (a locker found alive, a look read), as nothing
    /// watched it.
    ///
    /// # Errors
    ///
    /// [`locksmith_core::LockError::Unavailable`] when the kernel's limits of inotify instances
    /// or watches are reached (saying which), or the thread cannot start.
    pub fn start(self: &Arc<Self>) -> Result<()> {
        let mut watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        if watch.is_some() {
            return Ok(());
        }
        let dir = &self.dir;
        let fd = inotify::init(CreateFlags::CLOEXEC).map_err(|e| errno_error(&cannot_watch(e), dir, e))?;
        let add = |path: &Path, flags| {
            inotify::add_watch(&fd, path, flags).map_err(|e| errno_error(&cannot_watch(e), path, e))
        };
        let states = add(dir, WatchFlags::MOVED_TO | WatchFlags::DELETE | WatchFlags::MODIFY)?;
        let owners = add(&dir.join(OWNERS_DIR), WatchFlags::CLOSE_WRITE | WatchFlags::DELETE)?;
        let fd = Arc::new(fd);
        let (weak, reader) = (Arc::downgrade(self), fd.clone());
        std::thread::Builder::new()
            .name("locksmith-file-wake".into())
            .spawn(move || {
                read_events(&reader, &weak, owners);
                if let Some(hub) = weak.upgrade() {
                    hub.reading.store(false, Ordering::Release);
                }
            })
            .map_err(|e| crate::error::io_error("cannot start the wake-up thread for", dir, e))?;
        *watch = Some((fd, [states, owners]));
        // Nothing watched until now: what was remembered or counted may be stale.
        self.owner_ended(None);
        self.changed(None);
        self.reading.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether [`Hub::start`] ran (the thread may have stopped since: see [`Hub::reading`]).
    pub fn started(&self) -> bool {
        self.watch.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// The `Notify` that the changes of lock `stem` wake.
    pub fn lock(&self, stem: &str) -> Arc<Notify> {
        live_or_new(&self.locks, stem, Notify::new)
    }

    /// How many times a locker of the directory ended (or events were dropped) so far.
    pub fn owner_events(&self) -> u64 {
        self.owner_events.load(Ordering::Acquire)
    }

    /// The heartbeat locker `owner` had when it was last found alive, if no event since says it
    /// may have ended (and events are still read): checking its liveness file costs four system
    /// calls, and a queue of 1,000 waiters names 1,000 lockers. A locker beats without an event,
    /// so its heartbeat may be newer than this (see `State::prune`).
    pub fn remembered(&self, owner: &str) -> Option<u64> {
        if !self.reading() {
            return None;
        }
        self.alive.lock().unwrap_or_else(|e| e.into_inner()).get(owner).copied()
    }

    /// Whether locker `owner` was found alive by this process and nothing since said it ended,
    /// whether or not events are read: a hint only, for what may skip a check (a dead locker's
    /// file left for a later clean-up), never to keep an entry alive.
    pub fn known_alive(&self, owner: &str) -> bool {
        self.alive.lock().unwrap_or_else(|e| e.into_inner()).contains_key(owner)
    }

    /// Remembers locker `owner` alive with heartbeat `beat`, as a check found it that started
    /// when [`Hub::owner_events`] said `events`; not if a locker ended since (it may be this one).
    pub fn found_alive(&self, owner: &str, beat: u64, events: u64) {
        let mut alive = self.alive.lock().unwrap_or_else(|e| e.into_inner());
        if self.owner_events() == events {
            let remembered = alive.entry(owner.to_owned()).or_insert(beat);
            *remembered = (*remembered).max(beat);
        }
    }

    /// Locker `owner`'s liveness file was closed or removed (`None`: events were dropped, any
    /// may have): it is forgotten and the event counted, under the lock [`Hub::found_alive`]
    /// takes, before anyone is woken.
    fn owner_ended(&self, owner: Option<&str>) {
        let mut alive = self.alive.lock().unwrap_or_else(|e| e.into_inner());
        match owner {
            Some(owner) => drop(alive.remove(owner)),
            None => alive.clear(),
        }
        self.owner_events.fetch_add(1, Ordering::AcqRel);
    }

    /// The change counter of lock `stem`: it grows whenever the kernel reports a change of the
    /// lock's state file (and, for every lock, when the kernel dropped events), so a holder that
    /// read the counter before reading the file knows the file is unchanged while the counter
    /// stays, as long as [`Hub::reading`].
    pub fn changes(&self, stem: &str) -> Changes {
        let mut counters = self.changes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(changes) = counters.by_stem.get(stem).and_then(Weak::upgrade) {
            return changes;
        }
        if counters.by_stem.len() >= 2 * counters.live_at_last_sweep + 64 {
            counters.by_stem.retain(|_, c| c.strong_count() > 0);
            counters.live_at_last_sweep = counters.by_stem.len();
        }
        let changes = Changes::default();
        counters.by_stem.insert(stem.to_owned(), Arc::downgrade(&changes));
        changes
    }

    /// Whether the kernel's events are still read: once not, changes are not counted any more.
    pub fn reading(&self) -> bool {
        self.reading.load(Ordering::Acquire)
    }

    /// Counts a change of lock `stem` (`None`: of every lock): the kernel reported it, or this
    /// process just made it (its event comes later, and a look or renewal in between must not
    /// take a read from before it as current: a waiter that did not see its own entry after
    /// joining would join again).
    pub fn changed(&self, stem: Option<&str>) {
        let counters = self.changes.lock().unwrap_or_else(|e| e.into_inner());
        let bump = |c: &Weak<AtomicU64>| {
            if let Some(c) = c.upgrade() {
                c.fetch_add(1, Ordering::AcqRel);
            }
        };
        match stem {
            Some(stem) => counters.by_stem.get(stem).into_iter().for_each(bump),
            None => counters.by_stem.values().for_each(bump),
        }
    }

    /// Locker `owner` of this process opened the directory (`open`) or closed it: grants to its
    /// entries are kept for its waiters from then on, or no longer ([`Hub::granted`]).
    pub fn local_locker(&self, owner: &str, open: bool) {
        let mut lockers = self.lockers.lock().unwrap_or_else(|e| e.into_inner());
        match open {
            true => lockers.insert(owner.to_owned()),
            false => lockers.remove(owner),
        };
    }

    /// A step of this process is about to write a hand-over of lock `stem`: until the returned
    /// guard is dropped (after [`Hub::granted`], and before the step wakes the lock's waiters
    /// here), a waiter of this process woken meanwhile (by the kernel's event of the write) and
    /// finding no grant kept for it waits for that wake-up instead of reading the state file
    /// ([`Hub::handing_over`]).
    pub fn hand_over(self: &Arc<Self>, stem: &str) -> HandingOver {
        *self
            .handing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(stem.to_owned())
            .or_default() += 1;
        HandingOver {
            hub: self.clone(),
            stem: stem.to_owned(),
        }
    }

    /// Whether a step of this process is writing a hand-over of lock `stem` (see
    /// [`Hub::hand_over`]).
    pub fn handing_over(&self, stem: &str) -> bool {
        let handing = self.handing.lock().unwrap_or_else(|e| e.into_inner());
        !handing.is_empty() && handing.contains_key(stem)
    }

    /// Keeps the grants that a step of this process just wrote (and before it wakes the lock's
    /// waiters here), those to entries of this process's open lockers, for their waiters to take
    /// ([`Hub::take_grant`]) rather than read the state file again: the grant is what the file
    /// says, as of the write. A grant nobody takes (its waiter was cancelled meanwhile: its clean-up
    /// gives the lock back) is dropped with the others once [`KEPT_GRANTS`] are kept.
    pub fn granted(&self, handed: Vec<HandedOver>) {
        let lockers = self.lockers.lock().unwrap_or_else(|e| e.into_inner());
        let mut grants = self.grants.lock().unwrap_or_else(|e| e.into_inner());
        for grant in handed.into_iter().filter(|g| lockers.contains(&*g.owner)) {
            if grants.len() >= KEPT_GRANTS {
                grants.clear();
            }
            grants.insert(grant.id.clone(), grant);
        }
    }

    /// The grant a step of this process made to entry `id`, if it is still kept (taken once).
    pub fn take_grant(&self, id: &str) -> Option<HandedOver> {
        let mut grants = self.grants.lock().unwrap_or_else(|e| e.into_inner());
        match grants.is_empty() {
            true => None,
            false => grants.remove(id),
        }
    }

    /// Wakes the tasks of this process that wait on lock `stem` (`None`: on any lock); each
    /// looks at the state again.
    pub fn wake(&self, stem: Option<&str>) {
        let locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        let wake = |n: &Weak<Notify>| {
            if let Some(n) = n.upgrade() {
                n.notify_waiters();
            }
        };
        match stem {
            Some(stem) => locks.get(stem).into_iter().for_each(wake),
            None => locks.values().for_each(wake),
        }
    }
}

/// A hand-over of a lock being written by a step of this process (see [`Hub::hand_over`]).
pub(crate) struct HandingOver {
    hub: Arc<Hub>,
    stem: String,
}

impl Drop for HandingOver {
    fn drop(&mut self) {
        let mut handing = self.hub.handing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = handing.get_mut(&self.stem) {
            *n -= 1;
            if *n == 0 {
                handing.remove(&self.stem);
            }
        }
    }
}

/// The value of `key` in `map` if it lives, else a new one made by `make` (and the dead dropped):
/// what the tasks of this process share per lock.
pub(crate) fn live_or_new<K, Q, T, S>(map: &Mutex<HashMap<K, Weak<T>, S>>, key: &Q, make: impl FnOnce() -> T) -> Arc<T>
where
    S: std::hash::BuildHasher,
    K: Borrow<Q> + Eq + Hash,
    Q: ToOwned<Owned = K> + Eq + Hash + ?Sized,
{
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(value) = map.get(key).and_then(Weak::upgrade) {
        return value;
    }
    map.retain(|_, v| v.strong_count() > 0);
    let value = Arc::new(make());
    map.insert(key.to_owned(), Arc::downgrade(&value));
    value
}

impl Drop for Hub {
    /// Removing the watches makes the kernel send `IN_IGNORED`, which ends the thread.
    fn drop(&mut self) {
        if let Some((fd, watches)) = self.watch.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            for wd in watches {
                let _ = inotify::remove_watch(&*fd, wd);
            }
        }
    }
}

/// The thread: reads events (a blocking read when none is buffered) until the hub is gone.
fn read_events(fd: &OwnedFd, hub: &Weak<Hub>, owners: i32) {
    let mut buf = vec![MaybeUninit::uninit(); 64 * 1024];
    let mut reader = inotify::Reader::new(fd, &mut buf);
    loop {
        let event = match reader.next() {
            Ok(event) => event,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "file backend: reading wake-ups failed; waiters fall back to their deadlines");
                return;
            }
        };
        let Some(hub) = hub.upgrade() else { return };
        if event.events().contains(ReadFlags::IGNORED) {
            continue;
        }
        if event.events().contains(ReadFlags::QUEUE_OVERFLOW) {
            hub.changed(None);
            hub.owner_ended(None);
            hub.wake(None);
        } else if event.wd() == owners {
            hub.owner_ended(event.file_name().and_then(|n| n.to_str().ok()));
            hub.wake(None);
        } else if let Some(stem) = event
            .file_name()
            .and_then(|n| n.to_str().ok())
            .and_then(stem_of_state_file)
        {
            hub.changed(Some(stem));
            hub.wake(Some(stem));
        }
    }
}

/// What a failed `inotify_init` or `inotify_add_watch` says, with the limit it met if it met one
/// (the kernel's own message, "Too many open files" or "No space left on device", names neither).
fn cannot_watch(e: rustix::io::Errno) -> String {
    match e {
        rustix::io::Errno::MFILE => "cannot watch (the per-user limit of inotify instances, sysctl \
                                    fs.inotify.max_user_instances, or this process's limit of open files, \
                                    is reached)"
            .into(),
        rustix::io::Errno::NOSPC => {
            "cannot watch (the per-user limit of inotify watches, sysctl fs.inotify.max_user_watches, is reached)"
                .into()
        }
        _ => "cannot watch".into(),
    }
}
