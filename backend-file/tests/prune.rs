//! Nothing piles up in the lock directory: the files of locks nobody holds or waits for, idle for
//! the given time, and dead lockers' liveness files are removed by `Locker::prune` (and by every
//! locker's own passes), never a lock in use, and a lock used again goes on with tokens above
//! its earlier ones (the high-water mark in `.pruned`).

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::FileHarness;
use locksmith_core::conformance::Harness;
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::Locker;
use locksmith_file::FileBackend;

/// The lock and state files in the directory whose names start with `prefix`.
fn lock_files(h: &FileHarness, prefix: &str) -> Vec<String> {
    std::fs::read_dir(&h.dir)
        .unwrap()
        .flatten()
        .filter_map(|f| f.file_name().to_str().map(str::to_owned))
        .filter(|n| n.starts_with(prefix) && (n.ends_with(".lock") || n.ends_with(".state")))
        .collect()
}

/// The high-water mark of pruned tokens.
fn mark(h: &FileHarness) -> u64 {
    std::fs::read_to_string(h.dir.join(".pruned"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// After 200 names are used once, a prune with no idle time removes all their files (a dry run
/// before only counts them, a prune for an idle hour none); a name used again hands out a token
/// above every earlier one of it.
#[tokio::test]
async fn a_prune_leaves_no_file_of_200_names_used_once_and_tokens_go_on() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let mut last = HashMap::new();
    for i in 0..200 {
        let name = format!("once-{i:03}");
        let guard = match i % 2 {
            0 => locker.lock(&name).acquire().await.unwrap(),
            _ => locker.semaphore(&name, 2).acquire().await.unwrap(),
        };
        last.insert(name, guard.fencing_token());
        guard.release().await.unwrap();
    }
    assert_eq!(lock_files(&h, "once-").len(), 400);
    let dry = locker.prune(Duration::ZERO, true).await.unwrap();
    assert!(dry.dry_run && dry.locks == 200, "{dry:?}");
    assert_eq!(lock_files(&h, "once-").len(), 400, "a dry run removed files");
    let hour = locker.prune(Duration::from_secs(3600), false).await.unwrap();
    assert_eq!(hour.locks, 0, "{hour:?}");

    let report = locker.prune(Duration::ZERO, false).await.unwrap();
    assert_eq!(report.locks, 200, "{report:?}");
    assert_eq!(
        lock_files(&h, "once-"),
        Vec::<String>::new(),
        "files left after the prune"
    );
    assert!(
        mark(&h) >= *last.values().max().unwrap(),
        "the mark is below a pruned token"
    );
    for (i, name) in ["once-000", "once-001"].into_iter().enumerate() {
        let guard = match i {
            0 => locker.lock(name).acquire().await.unwrap(),
            _ => locker.semaphore(name, 2).acquire().await.unwrap(),
        };
        assert!(guard.fencing_token() > last[name], "{name}");
        guard.release().await.unwrap();
    }
    locker.shutdown().await.unwrap();
}

/// The mark, not the wall clock, is what a pruned lock starts from: with the mark an hour ahead
/// of the clock (as after the clock went back an hour once a prune had removed files), its next
/// token is above the mark.
#[tokio::test]
async fn a_lock_pruned_starts_above_the_mark_not_the_clock() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    locker.lock("mark").acquire().await.unwrap().release().await.unwrap();
    assert_eq!(locker.prune(Duration::ZERO, false).await.unwrap().locks, 1);
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let ahead = now_us + 3_600_000_000;
    std::fs::write(h.dir.join(".pruned"), format!("{ahead}\n")).unwrap();
    let guard = locker.lock("mark").acquire().await.unwrap();
    assert!(guard.fencing_token() > ahead, "{} <= {ahead}", guard.fencing_token());
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// A held lock and a waited-for one keep their files through prunes with no idle time; the
/// holder's renewals go on, and the waiter is granted when the holder releases.
#[tokio::test]
async fn a_prune_never_touches_a_held_or_waited_lock() {
    let h = FileHarness::new();
    let (a, b) = (h.locker().await, h.locker().await);
    let ttl = Duration::from_secs(2);
    let held = a.lock("busy-held").ttl(ttl).acquire().await.unwrap();
    let queued = a.lock("busy-queued").ttl(ttl).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("busy-queued").ttl(ttl).acquire().await }
    });
    while h.residue(&LockName::new("busy-queued").unwrap()).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..15 {
        assert_eq!(b.prune(Duration::ZERO, false).await.unwrap().locks, 0);
        tokio::time::sleep(Duration::from_millis(300)).await; // over two TTLs in all
    }
    assert_eq!(lock_files(&h, "busy-").len(), 4);
    assert!(held.lost_reason().is_none() && queued.lost_reason().is_none());
    let token = queued.fencing_token();
    queued.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
    held.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Lockers take and release a few names over and over, some holding across their renewals, while
/// another prunes with no idle time in a loop (removing the files between their uses, while
/// their steps open them): each lock's tokens, in the order of its grants, keep increasing, no
/// two hold one lock at once, and no guard is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prunes_in_a_loop_beside_lockers_lose_nothing() {
    let h = FileHarness::new();
    let names: Vec<String> = (0..6).map(|i| format!("churn-{i}")).collect();
    let locks: Vec<String> = names
        .iter()
        .flat_map(|n| [format!("{n}/mutex"), format!("{n}/sem")])
        .collect();
    let tokens: Arc<Mutex<HashMap<String, Vec<u64>>>> = Arc::default();
    let busy: Arc<HashMap<String, AtomicBool>> =
        Arc::new(locks.iter().map(|n| (n.clone(), AtomicBool::new(false))).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let pruner = {
        let (locker, stop) = (h.locker().await, stop.clone());
        tokio::spawn(async move {
            let mut removed = 0;
            while !stop.load(Ordering::Relaxed) {
                removed += locker.prune(Duration::ZERO, false).await.unwrap().locks;
            }
            locker.shutdown().await.unwrap();
            removed
        })
    };
    let mut workers = Vec::new();
    for w in 0..4 {
        let locker = h.locker().await;
        let (names, tokens, busy) = (names.clone(), tokens.clone(), busy.clone());
        workers.push(tokio::spawn(async move {
            for round in 0..60 {
                let name = &names[(w * 7 + round * 5) % names.len()];
                let (builder, lock) = match round % 3 {
                    0 => (locker.semaphore(name, 1), format!("{name}/sem")),
                    _ => (locker.lock(name), format!("{name}/mutex")),
                };
                let guard = builder.ttl(Duration::from_secs(3)).acquire().await.unwrap();
                assert!(!busy[&lock].swap(true, Ordering::SeqCst), "{lock}: two holders");
                tokens
                    .lock()
                    .unwrap()
                    .entry(lock.clone())
                    .or_default()
                    .push(guard.fencing_token());
                let hold = if round % 12 == 0 { 1_500 } else { 2 };
                tokio::time::sleep(Duration::from_millis(hold)).await;
                assert!(
                    guard.lost_reason().is_none(),
                    "{lock}: lost while held: {:?}",
                    guard.lost_reason()
                );
                busy[&lock].store(false, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
            locker.shutdown().await.unwrap();
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let removed = pruner.await.unwrap();
    assert!(removed > 0, "the prunes removed nothing: the test proves nothing");
    for (lock, tokens) in tokens.lock().unwrap().iter() {
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{lock}: tokens went back: {tokens:?}"
        );
    }
}

/// The liveness file of a locker that died without removing it goes with a prune (a dry run only
/// counts it); a live locker's stays. (In a directory pruned lately: a directory due for a pass
/// gets one as a locker opens it, which would remove the dead file before the dry run looks.)
#[tokio::test]
async fn a_dead_lockers_liveness_file_goes() {
    let h = FileHarness::new();
    let (dir, url) = pruned_lately(&h);
    let locker = locksmith_file::connect(&url).await.unwrap();
    let dead = dir.join(".owners").join(format!("{:032x}", rand::random::<u128>()));
    std::fs::write(&dead, b"0\n").unwrap();
    let dry = locker.prune(Duration::ZERO, true).await.unwrap();
    assert!(dry.owners >= 1 && dead.exists(), "{dry:?}");
    let report = locker.prune(Duration::ZERO, false).await.unwrap();
    assert!(report.owners >= 1 && !dead.exists(), "{report:?}");
    // The locker still locks (its own liveness file was left alone).
    locker.lock("after").acquire().await.unwrap().release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// Every locker prunes by itself now and then (here: every 200 ms, idle 0, through the hidden
/// knob the tests have): files of names used once go without anyone calling `prune`.
#[tokio::test]
async fn a_locker_prunes_by_itself() {
    let h = FileHarness::new();
    let backend = FileBackend::connect(&BackendUrl::parse(&h.url()).unwrap()).unwrap();
    backend.keep_pruning(Duration::from_millis(200), Duration::ZERO);
    let locker = Locker::new(backend);
    for i in 0..20 {
        locker
            .lock(format!("auto-{i}"))
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !lock_files(&h, "auto-").is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "files left after 10 s of passes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    locker.shutdown().await.unwrap();
}

/// Sets the modification time of the file at `path` to `ago` before now.
fn make_old(path: &std::path::Path, ago: Duration) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_modified(std::time::SystemTime::now() - ago).unwrap();
}

/// The lock and state files whose names start with `prefix` in `dir`.
fn files_in(dir: &std::path::Path, prefix: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with(prefix) && (name.ends_with(".lock") || name.ends_with(".state"))
        })
        .collect()
}

/// A directory of its own under the harness's, whose last pass of pruning is now (so that no
/// locker opening it prunes it), and its URL.
fn pruned_lately(h: &FileHarness) -> (std::path::PathBuf, BackendUrl) {
    let dir = h.dir.join("pruned-lately");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join(".pruned.lock"), b"").unwrap();
    let url = BackendUrl::parse(&format!("file://{}", dir.display())).unwrap();
    (dir, url)
}

/// A directory pruned lately ([`pruned_lately`]) with three names used once by a locker that
/// ended, their files made two hours old: what a directory used by short-lived processes holds.
async fn with_idle_names(h: &FileHarness) -> std::path::PathBuf {
    let (dir, url) = pruned_lately(h);
    let locker = locksmith_file::connect(&url).await.unwrap();
    for i in 0..3 {
        let guard = locker.lock(format!("used-once-{i}")).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    locker.shutdown().await.unwrap();
    let files = files_in(&dir, "used-once-");
    assert_eq!(files.len(), 6, "{files:?}");
    for file in &files {
        make_old(file, Duration::from_secs(2 * 3600));
    }
    dir
}

/// Bug: a locker's own passes began 5 to 10 minutes after it opened the directory, so a directory
/// used only by processes that live less (every `locksmith run`) kept the files of every name it
/// ever saw. A locker that opens a directory whose last pass is over ten minutes old prunes it at
/// once, in the background, without anyone calling `prune`.
#[tokio::test]
async fn a_locker_opening_a_directory_due_for_a_pass_prunes_it_at_once() {
    let h = FileHarness::new();
    let dir = with_idle_names(&h).await;
    make_old(&dir.join(".pruned.lock"), Duration::from_secs(11 * 60));
    let url = BackendUrl::parse(&format!("file://{}", dir.display())).unwrap();
    let locker = locksmith_file::connect(&url).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !files_in(&dir, "used-once-").is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "files of idle locks left 10 s after a locker opened a directory due for a pass: {:?}",
            files_in(&dir, "used-once-")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The pass recorded its end: the next process to open the directory does not prune again.
    let last = std::fs::metadata(dir.join(".pruned.lock")).unwrap().modified().unwrap();
    assert!(last.elapsed().unwrap_or_default() < Duration::from_secs(60), "{last:?}");
    locker.shutdown().await.unwrap();
}

/// One pass a directory about every ten minutes, however many processes open it: a locker that
/// opens a directory pruned a moment ago leaves its idle locks to the next pass (here removed by
/// an explicit `prune`, which shows they were idle).
#[tokio::test]
async fn a_locker_opening_a_directory_pruned_lately_leaves_it_alone() {
    let h = FileHarness::new();
    let dir = with_idle_names(&h).await;
    let url = BackendUrl::parse(&format!("file://{}", dir.display())).unwrap();
    let locker = locksmith_file::connect(&url).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        files_in(&dir, "used-once-").len(),
        6,
        "a directory pruned lately was pruned again"
    );
    let report = locker.prune(Duration::from_secs(3600), false).await.unwrap();
    assert_eq!(report.locks, 3, "{report:?}");
    assert!(files_in(&dir, "used-once-").is_empty());
    locker.shutdown().await.unwrap();
}
