//! Liveness: one file per locker in `.owners/`, locked (`flock`) for as long as the locker lives,
//! holding its heartbeat.
//!
//! - **Death.** The kernel drops a `flock` when the last descriptor of its open file closes, which
//!   happens when the process ends however it ends (`exit`, a panic, SIGKILL). So an owner whose
//!   file another process can lock is gone, and its entries in every queue are dead: any
//!   transaction drops them, at once, with no TTL to wait for. The file is open for writing, so
//!   its closing also raises `IN_CLOSE_WRITE` on the directory, which is what wakes waiters when a
//!   holder's process dies (see `wake.rs`).
//! - **Heartbeat.** The file's 8 bytes are the `CLOCK_BOOTTIME` (ns) of the locker's last renewal
//!   (or of a waiter's periodic beat), written in place. An entry lives for its TTL past the later
//!   of its grant and that beat (`protocol/state.rs`), so one write renews every lock of the locker
//!   and a paused process loses them all once their TTLs pass.

use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

use crate::error::{errno_error, io_error, open_error};
use crate::protocol::state::Liveness;
use crate::safe_open;
use locksmith_core::Result;

/// This locker's liveness file, locked until it is dropped.
#[derive(Debug)]
pub(crate) struct Owner {
    /// Its name in `.owners/`: a random id.
    pub id: String,
    path: PathBuf,
    /// Open (and locked) for as long as the owner lives.
    file: Option<File>,
}

impl Owner {
    /// Creates and locks a new liveness file in `owners` (the `.owners` directory), with its first
    /// heartbeat `beat_ns`.
    pub fn create(owners: &Path, beat_ns: u64) -> Result<Owner> {
        // The only form of id locksmith writes: see [`is_owner_id`].
        let id = format!("{:032x}", crate::random::u128());
        let path = owners.join(&id);
        let file = make_file(owners, &id, beat_ns)?;
        Ok(Owner {
            id,
            path,
            file: Some(file),
        })
    }

    /// Whether the liveness file was removed behind this owner's back (`rm .owners/*`, a clean-up
    /// of old files): its open file has no name left, and every other process finds this locker
    /// dead. (The heartbeat, written through the open file, would go on succeeding.)
    pub fn removed(&self) -> bool {
        self.file
            .as_ref()
            .is_some_and(|file| rustix::fs::fstat(file).is_ok_and(|st| st.st_nlink == 0))
    }

    /// Makes the liveness file again, under the same id, with heartbeat `beat_ns` (after
    /// [`Owner::removed`]). Not the directories: a lock directory removed with everything in it
    /// is not made again under a locker that watches the old one (its wake-ups would never come);
    /// that locker's steps and renewals fail instead.
    pub fn make_again(&mut self, beat_ns: u64) -> Result<()> {
        let owners = self.path.parent().unwrap_or(Path::new("/"));
        // The old file (no name left) is closed once the new one is in place.
        self.file = Some(make_file(owners, &self.id, beat_ns)?);
        Ok(())
    }

    /// Writes the heartbeat `beat_ns` (8 bytes in place: no rename, no sync).
    pub fn beat(&self, beat_ns: u64) -> Result<()> {
        let file = self.file.as_ref().expect("an owner's file is open until it is dropped");
        file.write_all_at(&beat_ns.to_le_bytes(), 0)
            .map_err(|e| io_error("cannot write the heartbeat to", &self.path, e))
    }
}

/// Creates the liveness file `id` in `owners`, locked, with heartbeat `beat_ns`. It is written and
/// locked under a temporary name and then renamed into place, so no other process ever sees it
/// unlocked (which would make it dead).
fn make_file(owners: &Path, id: &str, beat_ns: u64) -> Result<File> {
    let (temp, path) = (owners.join(format!(".{id}.tmp")), owners.join(id));
    // Left by an attempt of this owner that failed half-way (the id is ours alone).
    let _ = std::fs::remove_file(&temp);
    let file = safe_open::options()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&temp)
        .map_err(|e| open_error("cannot create the liveness file", &temp, e))?;
    let made = flock(&file, FlockOperation::NonBlockingLockExclusive)
        .map_err(|e| errno_error("cannot lock the liveness file", &temp, e))
        .and_then(|()| {
            file.write_all_at(&beat_ns.to_le_bytes(), 0)
                .map_err(|e| io_error("cannot write the heartbeat to", &temp, e))
        })
        .and_then(|()| {
            std::fs::rename(&temp, &path).map_err(|e| io_error("cannot create the liveness file", &path, e))
        });
    if let Err(e) = made {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    Ok(file)
}

impl Drop for Owner {
    /// Unlocks (closing the file, which wakes the waiters of other processes) and removes the file.
    fn drop(&mut self) {
        drop(self.file.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The heartbeat of a liveness file that cannot be opened, from when it was last written (each
/// heartbeat rewrites it; `stat` needs no descriptor and no right to read): its owner lives
/// while it beats, and a dead one's entries end a TTL after its last heartbeat. A file gone
/// meanwhile is a dead owner's; one that cannot be looked at either counts as beating now.
fn beat_by_mtime(path: &Path) -> Liveness {
    let now = crate::protocol::state::Now::read().boot_ns;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Liveness::Dead,
        Ok(meta) => {
            let age = (meta.modified().ok())
                .and_then(|written| std::time::SystemTime::now().duration_since(written).ok())
                .unwrap_or_default();
            Liveness::Beat(now.saturating_sub(u64::try_from(age.as_nanos()).unwrap_or(u64::MAX)))
        }
        Err(_) => Liveness::Beat(now),
    }
}

/// Whether `id` is an owner id locksmith could have written: 32 lower-case hex digits, as
/// [`Owner::create`] makes them. Anything else (a NUL byte, a name too long for the file system,
/// a path) names no liveness file any locker holds.
pub(crate) fn is_owner_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether the owner `id` in `owners` is alive (its file exists and someone holds its lock), and
/// its last heartbeat. A dead owner's file is removed when `reap` is set (its lock is held while
/// the file is removed, so a live owner's file is never removed).
///
/// An id locksmith could never have written ([`is_owner_id`]: a state file written by hand or
/// damaged) is dead: its file cannot be opened, and counting it alive (as a file that cannot be
/// opened is, see [`beat_by_mtime`]) would keep its entries, and the lock, for good.
pub(crate) fn liveness(owners: &Path, id: &str, reap: bool) -> Liveness {
    if !is_owner_id(id) {
        tracing::warn!(
            owner = %id.escape_debug(),
            "file backend: an entry names an owner id locksmith never writes; counted dead"
        );
        return Liveness::Dead;
    }
    let path = owners.join(id);
    let file = match safe_open::options().read(true).open(&path) {
        Ok(file) => file,
        // No file: its owner ended. A link is not a liveness file (and is not followed).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound || safe_open::is_link(&e) => {
            return Liveness::Dead;
        }
        // A failure to tell (out of descriptors, no right to read it, something else in its
        // place): never drop a live holder early, and never keep a dead one for good.
        Err(_) => return beat_by_mtime(&path),
    };
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            if reap {
                let _ = std::fs::remove_file(&path);
            }
            Liveness::Dead
        }
        // Held by its owner (EWOULDBLOCK), or a failure to tell: count it alive, never drop a
        // live holder early. A heartbeat that cannot be read counts as "now".
        Err(_) => {
            let mut beat = [0u8; 8];
            match file.read_exact_at(&mut beat, 0) {
                Ok(()) => Liveness::Beat(u64::from_le_bytes(beat)),
                Err(_) => Liveness::Beat(crate::protocol::state::Now::read().boot_ns),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_locksmith_writes_are_owner_ids() {
        let owners = Path::new("/nonexistent");
        let made = format!("{:032x}", rand::random::<u128>());
        assert!(is_owner_id(&made));
        assert!(is_owner_id(&"0".repeat(32)));
        let long = "a".repeat(300);
        let nul = format!("{}\0", "a".repeat(31));
        let bad = [
            "",
            "o",
            "../etc/passwd",
            ".x",
            &made.to_uppercase(),
            &made[1..],
            &long,
            &nul,
        ];
        for id in bad {
            assert!(!is_owner_id(id), "{id:?}");
            assert_eq!(liveness(owners, id, false), Liveness::Dead, "{id:?}");
        }
    }
}
