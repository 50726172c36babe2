//! `inspect` and `list`: reads of the state files without their lock (a file is only ever
//! replaced whole), with the entries of the dead left out.

use locksmith_core::driver::LockName;
use locksmith_core::{Family, HolderInfo, ListedLock, LockError, LockInfo, Result};

use crate::conn::Dir;
use crate::error::io_error;
use crate::layout::{stem_of_state_file, LockFile};
use crate::protocol::state::Now;

/// Who holds the mutex `name`, with the holder's host and pid in its id, and how many wait.
pub(crate) fn inspect(dir: &Dir, name: &LockName) -> Result<LockInfo> {
    let state = dir.read(&LockFile::of(Family::Mutex, name))?;
    let now = Now::read();
    let holder = state.entries.iter().find_map(|e| {
        e.grant.map(|g| HolderInfo {
            holder_id: e.holder_id(),
            fencing_token: Some(g.token),
            ttl_remaining: Some(now.until(e.expires_ns)),
        })
    });
    Ok(LockInfo {
        holder,
        waiters: state.entries.iter().filter(|e| e.grant.is_none()).count(),
    })
}

/// The locks of the directory whose names start with `prefix` and that are in use (a file that
/// is not a state file is left out, with a warning).
pub(crate) fn list(dir: &Dir, prefix: &str) -> Result<Vec<ListedLock>> {
    let entries = std::fs::read_dir(&dir.path).map_err(|e| io_error("cannot list", &dir.path, e))?;
    let mut segments = Vec::new();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(stem) = file_name.to_str().and_then(stem_of_state_file) else {
            continue;
        };
        // One file that is not a state file (emptied by hand, written by another program) is
        // left out, not the whole listing: its own lock's calls name it and say what to do. A
        // failure to read (I/O) still fails the listing.
        match dir.read_stem(stem) {
            Ok(Some(state)) => segments.push((state.segment, state.entries.len())),
            Ok(None) => {}
            Err(LockError::Protocol(e)) => {
                tracing::warn!(error = %e, "file: list leaves out a state file it cannot read")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(ListedLock::from_segments(
        prefix,
        segments.iter().map(|(segment, n)| (&**segment, *n)),
    ))
}
