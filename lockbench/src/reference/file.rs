//! `file://` reference rows: the floor is a bare `flock` pair on one file (open + `LOCK_EX|LOCK_NB`,
//! then `LOCK_UN` + close), its notification floor an inotify event of a rename; the peers are the
//! `distributed-lock-file` crate (DistributedLock's file lock: `fd-lock` retried with backoff) and
//! the `fd-lock` crate itself (a blocking `write()` in a thread of its own per held lock, since its
//! guard borrows the lock and cannot cross an `await` on its own).

use std::fs::{File, OpenOptions};
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use async_trait::async_trait;
use distributed_lock_core::{DistributedLock, LockHandle, LockProvider};
use rustix::fs::{flock, FlockOperation};
use tokio::sync::oneshot;

use super::{token, FloorTimes, Notification, Reference};
use crate::system::{Held, LockClient, LockSystem};

/// Sets up the floor, the notification floor and the peers in subdirectories of the URL's directory.
pub async fn reference(url: &str) -> Result<Reference> {
    let parsed = locksmith::driver::BackendUrl::parse(url)?;
    let dir = PathBuf::from(format!("/{}", parsed.path)).join("lockbench-reference");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(Reference {
        floor: Some(Arc::new(Flock { dir: dir.clone() })),
        notify: Some(Arc::new(InotifyFloor { dir: dir.clone() })),
        peers: vec![
            Arc::new(DistributedLockFile { dir: dir.clone() }),
            Arc::new(FdLock { dir }),
        ],
        herd: Vec::new(),
        single_attempt: Vec::new(),
        plain_write: None,
    })
}

/// A file name for a lock name (the workloads' names have `/`).
fn file_for(dir: &std::path::Path, system: &str, name: &str) -> PathBuf {
    dir.join(format!("{system}-{}", name.replace('/', "_")))
}

/// The floor: one attempt, never waits.
struct Flock {
    dir: PathBuf,
}

struct FlockHeld(File);

#[async_trait]
impl LockSystem for Flock {
    fn system(&self) -> &'static str {
        "floor"
    }
    fn backend(&self) -> &'static str {
        "file"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        Ok(Arc::new(Flock { dir: self.dir.clone() }))
    }
}

#[async_trait]
impl LockClient for Flock {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(file_for(&self.dir, "floor", name))?;
        flock(&file, FlockOperation::NonBlockingLockExclusive).map_err(|e| anyhow!("flock: {e}"))?;
        Ok(Box::new(FlockHeld(file)))
    }
}

#[async_trait]
impl Held for FlockHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        flock(&self.0, FlockOperation::Unlock).map_err(|e| anyhow!("flock: {e}"))?;
        Ok(())
    }
}

/// The bare inotify latency: a watch on a directory, a file renamed into it at t0.
struct InotifyFloor {
    dir: PathBuf,
}

#[async_trait]
impl Notification for InotifyFloor {
    fn backend(&self) -> &'static str {
        "file"
    }
    async fn once(&self, blocked: Duration) -> Result<FloorTimes> {
        use rustix::fs::inotify;
        let watched = self.dir.join(format!("notify-{}", token()));
        std::fs::create_dir_all(&watched)?;
        let fd = inotify::init(inotify::CreateFlags::CLOEXEC)?;
        inotify::add_watch(&fd, &watched, inotify::WatchFlags::MOVED_TO)?;
        let (got, received) = oneshot::channel();
        std::thread::spawn(move || {
            let mut buf = vec![MaybeUninit::uninit(); 4096];
            let mut reader = inotify::Reader::new(&fd, &mut buf);
            let _ = got.send(reader.next().map(|_| Instant::now()));
        });
        tokio::time::sleep(blocked).await;
        let temp = self.dir.join(format!("notify-{}.tmp", token()));
        std::fs::write(&temp, b"")?;
        let t0 = Instant::now();
        std::fs::rename(&temp, watched.join("event"))?;
        let t1 = tokio::time::timeout(Duration::from_secs(10), received)
            .await
            .map_err(|_| anyhow!("no inotify event within 10 s"))??
            .map_err(|e| anyhow!("reading inotify: {e}"))?;
        let _ = std::fs::remove_dir_all(&watched);
        Ok(FloorTimes::notified(t1.saturating_duration_since(t0)))
    }
}

/// The `distributed-lock-file` crate, its own API unmodified.
struct DistributedLockFile {
    dir: PathBuf,
}

struct DlfClient(distributed_lock_file::FileLockProvider);

struct DlfHeld(distributed_lock_file::FileLockHandle);

#[async_trait]
impl LockSystem for DistributedLockFile {
    fn system(&self) -> &'static str {
        "distributed-lock-file"
    }
    fn backend(&self) -> &'static str {
        "file"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        let provider = distributed_lock_file::FileLockProvider::new(self.dir.join("distributed-lock-file"))
            .map_err(|e| anyhow!("{e}"))?;
        Ok(Arc::new(DlfClient(provider)))
    }
}

#[async_trait]
impl LockClient for DlfClient {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        let lock = self.0.create_lock(&name.replace('/', "_"));
        let handle = lock
            .acquire(Some(Duration::from_secs(60)))
            .await
            .map_err(|e| anyhow!("{e}"))?;
        Ok(Box::new(DlfHeld(handle)))
    }
}

#[async_trait]
impl Held for DlfHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        self.0.release().await.map_err(|e| anyhow!("{e}"))
    }
}

/// The `fd-lock` crate: a blocking `write()` in a thread that holds the guard until released.
struct FdLock {
    dir: PathBuf,
}

struct FdLockHeld {
    release: std::sync::mpsc::Sender<()>,
    released: oneshot::Receiver<()>,
}

#[async_trait]
impl LockSystem for FdLock {
    fn system(&self) -> &'static str {
        "fd-lock"
    }
    fn backend(&self) -> &'static str {
        "file"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        Ok(Arc::new(FdLock { dir: self.dir.clone() }))
    }
}

#[async_trait]
impl LockClient for FdLock {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        let path = file_for(&self.dir, "fd-lock", name);
        let (held, acquired) = oneshot::channel::<std::io::Result<()>>();
        let (release, wait_release) = std::sync::mpsc::channel::<()>();
        let (done, released) = oneshot::channel();
        std::thread::spawn(move || {
            let file = match OpenOptions::new().create(true).truncate(false).write(true).open(&path) {
                Ok(file) => file,
                Err(e) => {
                    let _ = held.send(Err(e));
                    return;
                }
            };
            let mut lock = fd_lock::RwLock::new(file);
            let written = lock.write();
            match written {
                Ok(guard) => {
                    let _ = held.send(Ok(()));
                    let _ = wait_release.recv();
                    drop(guard);
                    let _ = done.send(());
                }
                Err(e) => {
                    let _ = held.send(Err(e));
                }
            };
        });
        acquired.await.map_err(|_| anyhow!("the fd-lock thread ended"))??;
        Ok(Box::new(FdLockHeld { release, released }))
    }
}

#[async_trait]
impl Held for FdLockHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        self.release.send(()).map_err(|_| anyhow!("the fd-lock thread ended"))?;
        self.released.await.map_err(|_| anyhow!("the fd-lock thread ended"))
    }
}
