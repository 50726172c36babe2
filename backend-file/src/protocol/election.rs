//! Who leads an election (the first entry of its queue, once granted), and observing it: read
//! again when the kernel says the election's state file changed, or at the leader's expiry
//! (locksmith-core's `observe_by_reading`).

use std::sync::{Arc, Weak};

use tokio::time::Instant;

use locksmith_core::driver::observe::{observe_by_reading, LeaderRead};
use locksmith_core::driver::LockName;
use locksmith_core::{Family, Leader, LeaderWatch, Result};

use super::state::Now;
use crate::conn::Dir;
use crate::layout::LockFile;

/// Who leads, as one read of the state file says.
fn read(dir: &Dir, file: &LockFile) -> Result<LeaderRead> {
    let state = dir.read(file)?;
    Ok(match state.entries.first() {
        Some(e) => match e.grant {
            Some(g) => LeaderRead::Leads(
                Leader {
                    value: e.value.to_string(),
                    term: g.token,
                    holder_id: e.holder_id(),
                },
                Instant::now() + Now::read().until(e.expires_ns),
            ),
            None => LeaderRead::Pending,
        },
        None => LeaderRead::Nobody,
    })
}

/// The leader of election `name` now.
pub(crate) fn leader(dir: &Dir, name: &LockName) -> Result<Option<Leader>> {
    Ok(read(dir, &LockFile::of(Family::Election, name))?.leader())
}

/// Watches election `name` (see `observe_by_reading`); the observation holds the backend weakly
/// and ends with it.
pub(crate) fn observe(dir: &Arc<Dir>, name: &LockName) -> Result<LeaderWatch> {
    let file = LockFile::of(Family::Election, name);
    dir.hub.start()?;
    let wake = dir.hub.lock(&file.stem);
    let dir: Weak<Dir> = Arc::downgrade(dir);
    observe_by_reading(wake, move || dir.upgrade().map(|dir| read(&dir, &file)))
}
