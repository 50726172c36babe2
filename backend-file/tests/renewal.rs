//! Renewing many locks: one heartbeat, and no read of a state file that nobody changed; a state
//! file changed by hand is still seen at the next renewal.

mod common;

use std::mem::MaybeUninit;
use std::time::Duration;

use common::FileHarness;
use locksmith_core::conformance::Harness;
use locksmith_core::driver::LockName;
use locksmith_core::Family;
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

/// How many `.state` files were opened in `dir` since the watch `fd` started (a non-blocking
/// read of the events it buffered).
fn state_files_opened(fd: &std::os::fd::OwnedFd) -> usize {
    let mut buf = vec![MaybeUninit::uninit(); 64 * 1024];
    let mut reader = inotify::Reader::new(fd, &mut buf);
    let mut opened = 0;
    while let Ok(event) = reader.next() {
        let name = event.file_name().and_then(|n| n.to_str().ok()).unwrap_or_default();
        opened += usize::from(name.ends_with(".state"));
    }
    opened
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_held_locks_reads_no_state_file_that_did_not_change() {
    const LOCKS: usize = 40;
    let h = FileHarness::new();
    let locker = h.locker().await;
    let ttl = Duration::from_millis(300);
    let base = locksmith_core::conformance::unique_name("renew-reads");
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        guards.push(locker.lock(format!("{base}/{i}")).ttl(ttl).acquire().await.unwrap());
    }
    // The first renewals read each state file once; watch what the next ones do.
    tokio::time::sleep(ttl).await;
    let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).unwrap();
    inotify::add_watch(&fd, &h.dir, WatchFlags::OPEN).unwrap();
    // About 9 renewals (every third of the TTL).
    tokio::time::sleep(ttl * 3).await;
    let opened = state_files_opened(&fd);
    assert!(
        guards.iter().all(|g| g.is_held()),
        "every lock is still held after {:?}",
        ttl * 4
    );
    assert!(
        opened < LOCKS,
        "renewals of {LOCKS} untouched locks opened state files {opened} times in about 9 renewals"
    );
    for g in guards {
        g.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_emptied_in_place_by_hand_is_seen_as_lost() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let name = locksmith_core::conformance::unique_name("emptied");
    let guard = locker
        .lock(&name)
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    // Let renewals go by first, so that the file is known as read and unchanged.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(guard.is_held());
    let path = h.look.state_path(Family::Mutex, &LockName::new(&name).unwrap());
    std::fs::write(&path, b"").unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires once the holder's entry is gone from its state file");
}
