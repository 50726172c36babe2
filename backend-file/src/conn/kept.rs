//! The lock and state files of a locker's recent steps, kept open between steps, so that an
//! uncontended step opens and closes nothing (an open walks the path; the files' names are long).
//!
//! A kept file is taken out for one step and put back after it: two steps of one process at the
//! same time never share an open file (the `flock` of a lock file excludes other open files
//! only), the second opens its own, as every step did before. A kept lock file is unlocked (its
//! `flock` released) before it is put back, and is checked to be still the file at its path once
//! locked again (as a new one is); a kept state file is checked to still have a name. At most
//! [`KEEP`] of each are kept; `shutdown` closes them.

use std::collections::HashMap;
use std::fs::File;

use locksmith_core::driver::fast_hash::FastBuildHasher;

use super::txn::Locked;

/// How many lock files, and how many state files, a locker keeps open.
const KEEP: usize = 16;

/// The files kept, by lock stem: a taken file leaves its slot empty, for the step to put it back
/// without a new key.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    locks: HashMap<String, Option<Locked>, FastBuildHasher>,
    states: HashMap<String, Option<File>, FastBuildHasher>,
    /// Set by `shutdown`: nothing is kept any more.
    closed: bool,
}

impl Kept {
    /// The kept lock file of `stem` (unlocked), taken out.
    pub fn take_lock(&mut self, stem: &str) -> Option<Locked> {
        self.locks.get_mut(stem)?.take()
    }

    /// Keeps the lock file `unlocked` of `stem` for the next step, if there is room.
    pub fn put_lock(&mut self, stem: &str, unlocked: Locked) {
        put(&mut self.locks, self.closed, stem, unlocked);
    }

    /// The kept state file of `stem` (open for reading and writing), taken out.
    pub fn take_state(&mut self, stem: &str) -> Option<File> {
        self.states.get_mut(stem)?.take()
    }

    /// Keeps the state file `file` of `stem` for the next step, if there is room.
    pub fn put_state(&mut self, stem: &str, file: File) {
        put(&mut self.states, self.closed, stem, file);
    }

    /// Closes every kept file, and keeps none from now on.
    pub fn close(&mut self) {
        self.closed = true;
        self.locks.clear();
        self.states.clear();
    }
}

/// Puts `file` in the slot of `stem`: its own slot, or a new one if there are fewer than [`KEEP`]
/// (else it is closed); none once `closed`.
fn put<T>(slots: &mut HashMap<String, Option<T>, FastBuildHasher>, closed: bool, stem: &str, file: T) {
    if closed {
        return;
    }
    if let Some(slot) = slots.get_mut(stem) {
        *slot = Some(file);
    } else if slots.len() < KEEP {
        slots.insert(stem.to_owned(), Some(file));
    }
}
