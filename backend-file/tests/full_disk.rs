//! `file://` on a full file system: a lock directory on a small tmpfs of the test's own (mounted
//! here; it needs root, which CI has: the test says so and passes over itself elsewhere) is
//! filled with another file until writes fail with ENOSPC. What must hold:
//!
//! - an acquire that needs a new state file fails with a clear error naming the full disk,
//!   within its timeout (no hang, no panic), and a `try` too; one whose state file exists may be
//!   granted (it is written in place, in blocks it has), with a larger token;
//! - a lock held before keeps its lease or is reported lost; nobody else gets it meanwhile;
//! - nothing is left half-written: once space is freed, every lock's state reads back (a
//!   `list`, `inspect`, acquires of every name), and fencing tokens keep growing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::{LockError, Locker};

/// A tmpfs of `size` mounted on a new directory; unmounted (and removed) on drop.
struct SmallFs {
    dir: PathBuf,
}

impl SmallFs {
    fn mount(size: &str) -> Option<SmallFs> {
        let dir = std::env::temp_dir().join(format!("locksmith-full-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            let _ = std::fs::remove_dir(&dir);
            eprintln!("full_disk: cannot mount a tmpfs here (needs root): this test checks nothing on this machine");
            return None;
        }
        Some(SmallFs { dir })
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Writes `dir/filler` until the file system is full.
fn fill(dir: &Path) {
    let mut f = std::fs::File::create(dir.join("filler")).expect("filler");
    let chunk = vec![0u8; 4096];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => panic!("filling the tmpfs: {e}"),
        }
    }
    let _ = f.sync_all();
    // Whatever page is left: one byte at a time.
    while f.write(&[0]).is_ok_and(|n| n == 1) {}
}

async fn locker(url: &str) -> Locker {
    locksmith_file::connect(&BackendUrl::parse(url).unwrap())
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_file_system_acquires_fail_clearly_and_nothing_is_half_written() {
    let Some(fs) = SmallFs::mount("512k") else { return };
    let url = format!("file://{}/locks", fs.dir.display());
    let (a, b) = (locker(&url).await, locker(&url).await);
    let ttl = Duration::from_secs(1);
    let mut tokens = Vec::new();
    // Some locks used and released (state files that exist), one held.
    for i in 0..5 {
        let g = a.lock(format!("used/{i}")).ttl(ttl).acquire().await.expect("acquire");
        tokens.push((format!("used/{i}"), g.fencing_token()));
        g.release().await.expect("release");
    }
    let held = a.lock("held").ttl(ttl).acquire().await.expect("acquire");
    tokens.push(("held".to_owned(), held.fencing_token()));

    fill(&fs.dir);

    // A new name needs a new state file: refused at once, naming the full disk. An existing one
    // is written in place (its frames take no new block): granted, or refused as clearly. A
    // waiter on the held one is not granted: refused, or out of time. Each within its timeout.
    for name in ["new", "used/0", "held"] {
        let started = tokio::time::Instant::now();
        let got = b.lock(name).ttl(ttl).timeout(Duration::from_secs(3)).acquire().await;
        let took = started.elapsed();
        assert!(took < Duration::from_secs(6), "{name}: the acquire took {took:?}");
        let e = match (name, got) {
            ("used/0", Ok(granted)) => {
                let before = tokens.iter().find(|(n, _)| n == name).map(|(_, t)| *t).unwrap();
                assert!(
                    granted.fencing_token() > before,
                    "{name}: a fencing token went backwards"
                );
                granted.release().await.expect("release on the full file system");
                continue;
            }
            (_, Ok(granted)) => panic!("{name}: granted on a full file system: {granted:?}"),
            (_, Err(e)) => e,
        };
        let text = e.to_string();
        eprintln!("{name}: {took:?}: {text}");
        assert!(
            !matches!(e, LockError::Protocol(_)),
            "{name}: a full disk reported as a broken state: {text}"
        );
        if name == "new" {
            assert!(
                text.contains("No space left") || text.contains("full"),
                "{name}: {text}"
            );
        }
    }
    match b.lock("new").try_acquire().await {
        Ok(None) | Err(LockError::Unavailable { .. }) => {}
        other => panic!("a try on a full file system: {other:?}"),
    }

    // The held lock: its lease renews, or its holder is told; nobody else has it.
    tokio::time::sleep(3 * ttl).await;
    let lost = held.lost_reason();
    eprintln!("the held lock after three TTLs of a full disk: lost {lost:?}");
    assert!(
        b.lock("held").try_acquire().await.map_or(true, |g| g.is_none()),
        "the held lock was granted to another"
    );

    // Space again: every state reads back and tokens keep growing.
    std::fs::remove_file(fs.dir.join("filler")).expect("free the space");
    if lost.is_none() {
        held.release()
            .await
            .expect("release of the lock held through the full disk");
    } else {
        let _ = held.release().await;
    }
    let listed = b.list("").await.expect("list after the disk was full");
    assert!(
        listed.is_empty(),
        "locks in use after every one was released: {listed:?}"
    );
    for (name, before) in tokens {
        let g = b
            .lock(&name)
            .ttl(ttl)
            .timeout(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{name} after the disk was full: {e}"));
        assert!(g.fencing_token() > before, "{name}: a fencing token went backwards");
        g.release().await.expect("release");
    }
}
