//! The "connection" of a file backend: the directory, this locker's liveness file in it
//! (`owner.rs`), and transactions on a lock's state file (`txn.rs`).

mod owner;
mod txn;

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use lockcore::{LockError, Result};

use crate::error::io_error;
use crate::layout::OWNERS_DIR;
use crate::wake::Hub;
use owner::Owner;

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
    pub owner_id: String,
    /// This process, as entries record it.
    pub pid: u32,
    /// This host's name.
    pub host: String,
    /// This boot's id.
    pub boot: String,
    /// Wake-ups from the kernel for this directory.
    pub hub: Arc<Hub>,
    /// Set by `shutdown`.
    closed: AtomicBool,
    /// Whether a step that hands out a token syncs it to disk (the URL's `sync=`).
    sync: bool,
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
        let owner = Owner::create(&owners)?;
        Ok(Dir {
            hub: Hub::for_dir(&path)?,
            owner_id: owner.id.clone(),
            owner: Mutex::new(Some(owner)),
            owners,
            path,
            pid: std::process::id(),
            host: host_name(),
            boot: boot_id(),
            closed: AtomicBool::new(false),
            sync,
        })
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
        drop(self.owner.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    /// Whether the locker `owner` is alive (this one: until closed). `reap` removes a dead
    /// owner's liveness file.
    fn is_alive(&self, owner: &str, reap: bool) -> bool {
        if owner == self.owner_id {
            return !self.closed.load(Ordering::Acquire);
        }
        owner::is_alive(&self.owners, owner, reap)
    }
}

/// This host's name (what `inspect` shows beside the pid).
fn host_name() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// This boot's id: entries written in another boot are dead. Empty where the kernel has none
/// (then a reboot is told by the liveness files alone, which no process holds after it).
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}
