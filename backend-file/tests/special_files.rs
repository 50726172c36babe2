//! Files in the lock directory that are not regular files (a FIFO someone made where a state or
//! lock file goes) are refused, never waited on: opening a FIFO for reading blocks until a writer
//! comes, which held a lock's `flock` (in a step) or a runtime's worker thread (`inspect`,
//! `list`) for good.

mod common;

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::FileHarness;
use locksmith_core::conformance::Harness;
use locksmith_core::driver::LockName;
use locksmith_core::{Family, LockError};

/// How long a call may take before it counts as hanging.
const HANG: Duration = Duration::from_secs(5);

/// A FIFO at `path`; on drop, anyone still blocked opening it for reading is let go (a writer
/// opens and closes it), so that a failing test ends instead of hanging its runtime's shutdown.
struct Fifo(PathBuf);

impl Fifo {
    fn make(path: &Path) -> Fifo {
        let mode = rustix::fs::Mode::from_raw_mode(0o644);
        rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, mode, 0).expect("mkfifo");
        Fifo(path.to_owned())
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let nonblock = rustix::fs::OFlags::NONBLOCK.bits() as i32;
        for _ in 0..50 {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(nonblock)
                .open(&self.0);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The path of the mutex `name`'s state file, and of its lock file beside it.
fn paths(h: &FileHarness, name: &str) -> (PathBuf, PathBuf) {
    let state = h.look.state_path(Family::Mutex, &LockName::new(name).unwrap());
    (state.clone(), state.with_extension("lock"))
}

/// Bug: a FIFO at a state file's path blocked every step of that lock (holding its lock file's
/// `flock`), and `inspect` and `list` blocked a worker thread of the caller's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_for_a_state_file_is_refused_not_waited_on() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let (state, _) = paths(&h, "fifo/state");
    let _fifo = Fifo::make(&state);
    let l = locker.clone();
    let tried = tokio::time::timeout(
        HANG,
        tokio::spawn(async move { l.lock("fifo/state").try_acquire().await }),
    );
    let tried = tried.await.expect("try_acquire hung on a FIFO").unwrap();
    assert!(
        matches!(&tried, Err(LockError::Protocol(m)) if m.contains("not a regular file")),
        "{tried:?}"
    );
    let l = locker.clone();
    let inspected = tokio::time::timeout(HANG, tokio::spawn(async move { l.inspect("fifo/state").await }));
    let inspected = inspected.await.expect("inspect hung on a FIFO").unwrap();
    assert!(matches!(&inspected, Err(LockError::Protocol(_))), "{inspected:?}");
    // `list` leaves out a file that is not a state file (as it does an emptied one), and lists
    // the others.
    let held = locker.lock("fifo/other").try_acquire().await.unwrap().expect("free");
    let l = locker.clone();
    let listed = tokio::time::timeout(HANG, tokio::spawn(async move { l.list("fifo/").await }));
    let listed = listed.await.expect("list hung on a FIFO").unwrap().expect("list");
    let names: Vec<_> = listed.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["fifo/other"]);
    held.release().await.unwrap();
}

/// A FIFO at a lock file's path is refused too: a step never runs under a `flock` on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_for_a_lock_file_is_refused() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let (_, lock) = paths(&h, "fifo/lock");
    let _fifo = Fifo::make(&lock);
    let l = locker.clone();
    let tried = tokio::time::timeout(
        HANG,
        tokio::spawn(async move { l.lock("fifo/lock").try_acquire().await }),
    );
    let tried = tried.await.expect("try_acquire hung on a FIFO").unwrap();
    assert!(
        matches!(&tried, Err(LockError::Protocol(m)) if m.contains("not a regular file")),
        "{tried:?}"
    );
}
