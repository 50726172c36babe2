//! A waiter's look at its lock's state: one read per change, shared by every task of this process
//! that waits on that lock.
//!
//! Every change of a lock wakes all its waiters in this process, and each must then see whether
//! its turn has come. Reading the state costs a parse of the whole queue and a liveness check of
//! every locker in it, so 1,000 waiters each reading it on their own cost the process O(N²) work
//! per change: enough, on two cores, to keep the holder's renewals from being answered. Instead
//! the first task to look reads and the others take its result, as long as
//! nothing could have changed what it says:
//!
//! - the lock's change counter (`wake.rs`, read before the read) is the same: its state file was
//!   not replaced, removed or written since;
//! - no locker of the directory ended since (its entries may have been ahead of anyone);
//! - no entry in it has expired since (its expiry is a time, not an event);
//! - the kernel's events are still read.
//!
//! What a look gives is each entry's place (whether its turn has come, and when the next entry
//! ahead of it expires), found for every entry at once. It is only a hint: a waiter that sees its
//! turn takes it in a transaction, which decides.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use locksmith_core::driver::fast_hash::FastBuildHasher;
use locksmith_core::Result;

use crate::conn::Dir;
use crate::layout::LockFile;
use crate::protocol::queue::{self, Place};
use crate::protocol::state::{Now, Text};
use crate::wake::{live_or_new, Changes};

/// The last look at one lock's state, shared by the waiting tasks of this process (see
/// [`SharedRead::of`]).
#[derive(Debug)]
pub(crate) struct SharedRead {
    /// The lock's change counter.
    changes: Changes,
    /// The last read, if still worth anything: held while a task reads, so the others wait for it.
    last: tokio::sync::Mutex<Option<LastRead>>,
}

/// The shared reads of this process, by directory and lock stem.
type Registry = HashMap<(PathBuf, String), Weak<SharedRead>>;

/// One read and what made it valid.
#[derive(Debug)]
struct LastRead {
    changes: u64,
    owner_events: u64,
    look: Arc<Look>,
}

/// What one read of a lock's state says to its waiters.
#[derive(Debug)]
pub(crate) struct Look {
    /// The place of each live entry, by id.
    places: HashMap<Text, Place, FastBuildHasher>,
    /// The earliest expiry of a live entry (`CLOCK_BOOTTIME` ns).
    next_expiry: Option<u64>,
}

impl Look {
    /// The place of entry `id`; `None` if it is not in the queue (it was dropped: its process
    /// could not beat in time).
    pub fn place(&self, id: &str) -> Option<Place> {
        self.places.get(id).copied()
    }
}

impl SharedRead {
    /// The shared read of lock `file` in `dir`'s directory, in this process.
    pub fn of(dir: &Dir, file: &LockFile) -> Arc<SharedRead> {
        static READS: OnceLock<Mutex<Registry>> = OnceLock::new();
        let key = (dir.path.clone(), file.stem.clone());
        live_or_new(READS.get_or_init(Default::default), &key, || SharedRead {
            changes: dir.hub.changes(&file.stem),
            last: tokio::sync::Mutex::default(),
        })
    }

    /// What the state of `file` says now: the last read's look if nothing could have changed it
    /// since, else a new read's. The caller registers for wake-ups before it looks,
    /// so a change after the counters were read wakes it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the read runs within one poll.
    pub async fn look(&self, dir: &Arc<Dir>, file: &LockFile) -> Result<Arc<Look>> {
        let mut last = self.last.lock().await;
        let changes = self.changes.load(Ordering::Acquire);
        let owner_events = dir.hub.owner_events();
        if let Some(seen) = last.as_ref() {
            let unchanged = seen.changes == changes && seen.owner_events == owner_events;
            let expired = seen.look.next_expiry.is_some_and(|ns| Now::read().boot_ns >= ns);
            if unchanged && !expired && dir.hub.reading() {
                return Ok(seen.look.clone());
            }
        }
        // A read of the page cache, never waiting on anything (a state file that is not a
        // regular file is refused, see `safe_open.rs`): here, not in a blocking thread.
        let state = dir.read(file)?;
        let look = Arc::new(Look {
            places: queue::places(&state)?,
            next_expiry: state.next_expiry(),
        });
        *last = Some(LastRead {
            changes,
            owner_events,
            look: look.clone(),
        });
        Ok(look)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use locksmith_core::driver::LockName;
    use locksmith_core::{Family, LockKind};

    use super::*;
    use crate::protocol::wait::new_entry;

    /// A waiter looks right after its own join: the change is this process's own, and its event
    /// may not have come yet. A look from before the join taken as current made the waiter join
    /// again (the fault suite's load, 2026-11-26): its second entry waited behind its first
    /// forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_look_right_after_this_process_changed_the_lock_sees_the_change() {
        let path = std::env::temp_dir().join(format!("locksmith-look-{:016x}", rand::random::<u64>()));
        let dir = Arc::new(Dir::open(&path, false).unwrap());
        let file = LockFile::of(Family::Mutex, &LockName::new("look").unwrap());
        let shared = SharedRead::of(&dir, &file);
        for i in 0..100 {
            shared.look(&dir, &file).await.unwrap();
            let entry = new_entry(&dir, &LockKind::Mutex, Duration::from_secs(10));
            let id = entry.id.clone();
            dir.transact(&file, |state, now| queue::join(state, entry, now))
                .unwrap();
            let look = shared.look(&dir, &file).await.unwrap();
            assert!(
                look.place(&id).is_some(),
                "join {i}: the look right after it does not show the new entry"
            );
        }
        drop(dir);
        let _ = std::fs::remove_dir_all(&path);
    }
}
