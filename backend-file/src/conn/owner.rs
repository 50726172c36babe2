//! Liveness: one file per locker in `.owners/`, locked (`flock`) for as long as the locker lives.
//!
//! The kernel drops a `flock` when the last descriptor of its open file closes, which happens when
//! the process ends however it ends (`exit`, a panic, SIGKILL). So an owner whose file another
//! process can lock is gone, and its entries in every queue are dead: any transaction drops them,
//! at once, with no TTL to wait for. The file is opened for writing, so its closing also raises
//! `IN_CLOSE_WRITE` on the directory, which is what wakes waiters when a holder's process dies
//! (see `wake.rs`).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

use crate::error::{errno_error, io_error};
use lockcore::Result;

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
    /// Creates and locks a new liveness file in `owners` (the `.owners` directory).
    pub fn create(owners: &Path) -> Result<Owner> {
        let id = format!("{:032x}", rand::random::<u128>());
        let path = owners.join(&id);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .map_err(|e| io_error("cannot create the liveness file", &path, e))?;
        flock(&file, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| errno_error("cannot lock the liveness file", &path, e))?;
        Ok(Owner {
            id,
            path,
            file: Some(file),
        })
    }
}

impl Drop for Owner {
    /// Unlocks (closing the file, which wakes the waiters of other processes) and removes the file.
    fn drop(&mut self) {
        drop(self.file.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether the owner `id` in `owners` is alive: its file exists and someone holds its lock. A dead
/// owner's file is removed when `reap` is set (its lock is held while the file is removed, so a
/// live owner's file is never removed).
pub(crate) fn is_alive(owners: &Path, id: &str, reap: bool) -> bool {
    if id.is_empty() || id.contains('/') || id.starts_with('.') {
        return false;
    }
    let path = owners.join(id);
    let Ok(file) = File::open(&path) else {
        return false;
    };
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            if reap {
                let _ = std::fs::remove_file(&path);
            }
            false
        }
        // Held by its owner (EWOULDBLOCK), or a failure to tell: count it alive, never drop a
        // live holder.
        Err(_) => true,
    }
}
