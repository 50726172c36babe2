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

/// Puts a symbolic link to itself in place of the state file at `path`, in one rename: reading
/// it fails with an I/O error (ELOOP), even for root. Returns the file's bytes.
fn make_unreadable(path: &std::path::Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let looped = path.with_extension("loop");
    std::os::unix::fs::symlink(path.file_name().unwrap(), &looped).unwrap();
    std::fs::rename(&looped, path).unwrap();
    bytes
}

/// Tries `name` with `locker` every third of `ttl` until it is free (then releases it); panics
/// after 15 TTLs, saying `what` still held it.
async fn free_within_15_ttls(locker: &locksmith_core::Locker, name: &str, ttl: Duration, what: &str) {
    for _ in 0..45 {
        if let Some(guard) = locker.lock(name).try_acquire().await.unwrap() {
            guard.release().await.unwrap();
            return;
        }
        tokio::time::sleep(ttl / 3).await;
    }
    panic!("{what} still held the lock after 15 TTLs");
}

/// Puts the state file's `bytes` back at `path`, in one rename.
fn restore(path: &std::path::Path, bytes: &[u8]) {
    let restored = path.with_extension("restored");
    std::fs::write(&restored, bytes).unwrap();
    std::fs::rename(&restored, path).unwrap();
}

/// A state file that cannot be read for a moment (an I/O error: here a symbolic link to itself
/// in its place) is no proof that the lease is gone: the renewal fails and is tried again, and the
/// lease lives on once the file reads again. (Before, the renewal took the error for "not in the
/// file": the lease was declared lost and forgotten, while its entry, back in the file, stayed
/// alive under its locker's heartbeats and held the lock for nobody.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_unreadable_for_a_moment_loses_no_lease() {
    let h = FileHarness::new();
    let (a, b) = (h.locker().await, h.locker().await);
    let name = locksmith_core::conformance::unique_name("unreadable");
    let ttl = Duration::from_millis(1500);
    let guard = a.lock(&name).ttl(ttl).acquire().await.unwrap();
    let path = h.look.state_path(Family::Mutex, &LockName::new(&name).unwrap());
    let bytes = make_unreadable(&path);
    tokio::time::sleep(ttl / 2).await; // a renewal or two meet the error
    restore(&path, &bytes);
    tokio::time::sleep(ttl * 2).await;
    assert!(guard.lost_reason().is_none(), "lost: {:?}", guard.lost_reason());
    assert!(b.lock(&name).try_acquire().await.unwrap().is_none(), "held by a");
    guard.release().await.unwrap();
    let next = b
        .lock(&name)
        .try_acquire()
        .await
        .unwrap()
        .expect("free after its release");
    next.release().await.unwrap();
}

/// A release that could not write (an I/O error: its state file unreadable for a moment) leaves
/// the lease to its locker's heartbeat, which removes its entry a TTL later. (Before, the release
/// forgot the lease first: its entry, back in the file, lived on under the heartbeats of its
/// locker, which held another lock, and nobody could take the lock while that locker lived.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_could_not_write_is_finished_by_the_heartbeat() {
    let h = FileHarness::new();
    let (a, b) = (h.locker().await, h.locker().await);
    let ttl = Duration::from_millis(300);
    let unique = locksmith_core::conformance::unique_name;
    let keep = a.lock(unique("keep")).ttl(ttl).acquire().await.unwrap(); // a beats on
    let name = unique("unwritten");
    let lease = a.lock(&name).ttl(ttl).acquire().await.unwrap().abandon();
    let path = h.look.state_path(Family::Mutex, &LockName::new(&name).unwrap());
    let bytes = make_unreadable(&path);
    let released = a.backend().release(&lease).await;
    restore(&path, &bytes);
    assert!(released.is_err(), "the release wrote: {released:?}");
    free_within_15_ttls(&b, &name, ttl, "the lease whose release failed").await;
    assert!(keep.is_held());
    keep.release().await.unwrap();
}

/// An acquire given up on (its future dropped) whose leave could not write (its state file
/// unreadable for a moment) leaves its entry to its locker's heartbeat, which removes it. (Before,
/// the entry was forgotten: it lived on under the heartbeats of its locker, which held another
/// lock, first in line, and nobody got the lock while that locker lived.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_that_could_not_write_is_finished_by_the_heartbeat() {
    let h = FileHarness::new();
    let (a, b, c) = (h.locker().await, h.locker().await, h.locker().await);
    let short = Duration::from_millis(300);
    let unique = locksmith_core::conformance::unique_name;
    let keep = a.lock(unique("keep")).ttl(short).acquire().await.unwrap(); // a beats on
    let name = unique("unwithdrawn");
    let key = LockName::new(&name).unwrap();
    let holder = b.lock(&name).ttl(Duration::from_secs(5)).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let (a, name) = (a.clone(), name.clone());
        async move { a.lock(&name).ttl(short).acquire().await }
    });
    for _ in 0..100 {
        if h.look.entries(Family::Mutex, &key).unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let path = h.look.state_path(Family::Mutex, &key);
    let bytes = make_unreadable(&path);
    waiter.abort(); // its clean-up's leave fails: the file cannot be read
    let _ = waiter.await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    restore(&path, &bytes);
    holder.release().await.unwrap();
    free_within_15_ttls(&c, &name, short, "the withdrawn waiter's entry").await;
    keep.release().await.unwrap();
}

/// The names in directory `dir`.
fn names(dir: &std::path::Path) -> std::collections::HashSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect()
}

/// A locker whose liveness file was removed behind its back (`rm .owners/*`, a clean-up of old
/// files in `/tmp`) makes it again before its next step, so the next lock it takes is its own.
/// (Every other process found it dead from then on, for as long as it lived, and took every lock
/// it was granted.) A lock it held meanwhile was the operator's damage: another process may take
/// it, and the holder is told at its next renewal, as when a state file is changed by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_liveness_file_removed_behind_a_lockers_back_is_made_again() {
    let h = FileHarness::new();
    let owners = h.dir.join(".owners");
    let before = names(&owners);
    let a = h.locker().await;
    let a_id = names(&owners)
        .difference(&before)
        .next()
        .cloned()
        .expect("A's liveness file");
    let b = h.locker().await;
    let base = locksmith_core::conformance::unique_name("relink");
    let ttl = Duration::from_millis(600);
    let held = a.lock(format!("{base}/held")).ttl(ttl).acquire().await.unwrap();
    std::fs::remove_file(owners.join(&a_id)).unwrap();

    // The damage: B may find A dead and take the lock A held; then A is told at its next
    // renewal, which makes A's liveness file again.
    let taken = b.lock(format!("{base}/held")).ttl(ttl).try_acquire().await.unwrap();
    if taken.is_some() {
        tokio::time::timeout(ttl * 3, held.lost())
            .await
            .expect("A was not told that it lost the lock");
    }
    let end = tokio::time::Instant::now() + ttl * 3;
    while !owners.join(&a_id).exists() {
        assert!(
            tokio::time::Instant::now() < end,
            "A's renewal did not make its liveness file again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop((held, taken));

    // Removed again while A is idle (B's process has seen it go): A's next lock is its own.
    std::fs::remove_file(owners.join(&a_id)).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let next = a.lock(format!("{base}/next")).ttl(ttl).acquire().await.unwrap();
    let contender = b.lock(format!("{base}/next")).ttl(ttl).try_acquire().await.unwrap();
    assert!(
        contender.is_none(),
        "B took the lock A was granted after its liveness file was removed"
    );
    assert!(next.is_held());
    next.release().await.unwrap();
}
