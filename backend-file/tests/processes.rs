//! The file backend between real processes: this test binary runs itself as the other process
//! (the test `child`, which does nothing unless `locksmith_core::conformance::process::child_task` says what to do).

mod common;

use std::time::Duration;

use locksmith_core::conformance::process::{child_task, say, ChildProcess};
use locksmith_core::conformance::{within, Harness};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::LockError;
use tokio::time::Instant;

use common::FileHarness;

/// What a child does ([`child_task`]): `hold <url> <name> <ttl ms>` (hold until killed, saying
/// `lost` if the lock is lost), `count <url> <name> <file> <rounds>` (add one to a counter file
/// under the lock, `rounds` times), `write <url> <name> <key>` (hold the lock and put values of
/// [`WRITTEN_LEN`] bytes at `key` under it, the `i`th one `i` (`u64`, little-endian) over and
/// over, until killed).
#[test]
fn child() {
    let Some(args) = child_task() else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let locker = locksmith_file::connect(&BackendUrl::parse(&args[1]).unwrap())
            .await
            .unwrap();
        match args[0].as_str() {
            "hold" => {
                let ttl = Duration::from_millis(args[3].parse().unwrap());
                let guard = locker.lock(&args[2]).ttl(ttl).acquire().await.unwrap();
                say(format!("held {}", guard.fencing_token()));
                guard.lost().await;
                say("lost");
            }
            "count" => {
                for _ in 0..args[4].parse::<u32>().unwrap() {
                    let guard = locker.lock(&args[2]).acquire().await.unwrap();
                    let n: u64 = std::fs::read_to_string(&args[3]).map_or(0, |s| s.trim().parse().unwrap());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    std::fs::write(&args[3], (n + 1).to_string()).unwrap();
                    guard.release().await.unwrap();
                }
                locker.shutdown().await.unwrap();
            }
            "write" => {
                let guard = locker.lock(&args[2]).acquire().await.unwrap();
                for i in 0u64.. {
                    let value = i.to_le_bytes().repeat(WRITTEN_LEN / 8);
                    guard.guarded().put(&args[3], value).await.unwrap();
                    say(format!("wrote {i}"));
                }
            }
            other => panic!("unknown child task {other}"),
        }
    });
}

/// How long a child may take to say its next line.
const SAYS: Duration = Duration::from_secs(30);

/// The length of the values a `write` child puts.
const WRITTEN_LEN: usize = 256 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_lock_passes_on_at_once_not_after_its_ttl() {
    let h = FileHarness::new();
    let name = locksmith_core::conformance::unique_name("killed");
    let mut child = ChildProcess::spawn(&format!("hold {} {name} 60000", h.url()));
    let token: u64 = child.says(SAYS).await.strip_prefix("held ").unwrap().parse().unwrap();
    let info = h.locker().await.inspect(&name).await.unwrap();
    let holder = info.holder.expect("the child holds").holder_id;
    assert!(
        holder.contains(&format!(":{}:", child.pid())),
        "inspect shows the holder's pid: {holder}"
    );
    let waiter = h.locker().await;
    let waiting = tokio::spawn(async move { waiter.lock(&name).timeout(Duration::from_secs(20)).acquire().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed_at = Instant::now();
    child.kill().await;
    let guard = waiting
        .await
        .unwrap()
        .expect("the waiter gets the lock of a killed holder");
    assert!(
        killed_at.elapsed() < Duration::from_secs(10),
        "the lock passed on {:?} after the kill; its TTL was 60 s",
        killed_at.elapsed()
    );
    assert!(guard.fencing_token() > token);
    guard.release().await.unwrap();
    // The killed process's liveness file goes once its entries are dropped, or at the next
    // connect: nothing piles up in .owners.
    drop(h.locker().await);
    let owners: Vec<_> = std::fs::read_dir(h.dir.join(".owners")).unwrap().flatten().collect();
    assert!(
        owners.len() <= 2,
        "liveness files of ended lockers are left: {:?}",
        owners.iter().map(|o| o.file_name()).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_loses_its_lock_after_its_ttl_and_is_told() {
    let h = FileHarness::new();
    let name = locksmith_core::conformance::unique_name("paused");
    let mut child = ChildProcess::spawn(&format!("hold {} {name} 1000", h.url()));
    let token: u64 = child.says(SAYS).await.strip_prefix("held ").unwrap().parse().unwrap();
    child.pause();
    let paused_at = Instant::now();
    let guard = h
        .locker()
        .await
        .lock(&name)
        .timeout(Duration::from_secs(20))
        .acquire()
        .await
        .expect("the lock of a paused holder passes on after its TTL");
    assert!(
        paused_at.elapsed() >= Duration::from_millis(300),
        "it passed on before the TTL"
    );
    assert!(guard.fencing_token() > token);
    child.resume();
    assert_eq!(
        child.says(SAYS).await,
        "lost",
        "the resumed holder is told it lost the lock"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_exclude_each_other() {
    let h = FileHarness::new();
    let name = locksmith_core::conformance::unique_name("count");
    let counter = h.dir.join("counter");
    let children: Vec<_> = (0..4)
        .map(|_| ChildProcess::spawn(&format!("count {} {name} {} 25", h.url(), counter.display())))
        .collect();
    for mut child in children {
        assert!(child.wait(Duration::from_secs(60)).await.success());
    }
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap(),
        "100",
        "an update was lost: two processes held the lock at once"
    );
    assert!(h
        .look
        .entries(locksmith_core::Family::Mutex, &LockName::new(&name).unwrap())
        .unwrap()
        .is_empty());
}

/// The classic bug of a blocking `flock` moved to a thread: the thread is granted the lock after
/// its caller gave up, and holds it for good. Here a waiter given up on (timeout, or its future
/// dropped at any point) never holds later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_given_up_on_never_acquires_later() {
    let h = FileHarness::new();
    let name = locksmith_core::conformance::unique_name("given_up");
    let lock_name = LockName::new(&name).unwrap();
    let (holder, waiter, other) = (h.locker().await, h.locker().await, h.locker().await);
    for round in 0..30u64 {
        let held = holder.lock(&name).acquire().await.unwrap();
        if round % 2 == 0 {
            let r = waiter.lock(&name).timeout(Duration::from_millis(20)).acquire().await;
            assert!(matches!(r, Err(LockError::Timeout(_))), "{r:?}");
        } else {
            let cut = Duration::from_micros(round * 150);
            assert!(tokio::time::timeout(cut, waiter.lock(&name).acquire()).await.is_err());
        }
        held.release().await.unwrap();
        // Whatever the dropped waiter had in flight has ended and been undone by now.
        let got = within(
            Duration::from_secs(10),
            "the lock after the waiter gave up",
            other.lock(&name).acquire(),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let entries = h.look.entries(locksmith_core::Family::Mutex, &lock_name).unwrap();
        assert_eq!(
            entries.len(),
            1,
            "round {round}: someone besides the holder is in line: {entries:?}"
        );
        got.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_directory_the_process_may_not_write_is_denied() {
    let url = BackendUrl::parse("file:///sys/locksmith-test").unwrap();
    let r = locksmith_file::connect(&url).await;
    assert!(matches!(r, Err(LockError::Denied(_))), "{r:?}");
    let r = locksmith_file::connect(&BackendUrl::parse("file://server/x").unwrap()).await;
    assert!(matches!(r, Err(LockError::InvalidUrl { .. })), "{r:?}");
}

/// A step that waits for the lock file (a process paused in the middle of its own step holds it)
/// cannot be stopped; when its caller gives up meanwhile, the clean-up runs after that step, never
/// before it (or the step would queue the entry again after it was removed, for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_stalled_on_the_lock_file_is_undone_after_it_ran() {
    let h = FileHarness::new();
    let name = locksmith_core::conformance::unique_name("stalled");
    let lock_name = LockName::new(&name).unwrap();
    let lock_file = h
        .look
        .state_path(locksmith_core::Family::Mutex, &lock_name)
        .with_extension("lock");
    let (waiter, other) = (h.locker().await, h.locker().await);
    for round in 0..10 {
        // Another process in the middle of a step: it holds the lock file.
        let paused = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_file)
            .unwrap();
        rustix::fs::flock(&paused, rustix::fs::FlockOperation::LockExclusive).unwrap();
        let gave_up = tokio::time::timeout(Duration::from_millis(50), waiter.lock(&name).acquire()).await;
        assert!(gave_up.is_err());
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(paused);
        let got = within(Duration::from_secs(10), "the lock after the stalled step ran", async {
            loop {
                if let Some(guard) = other.lock(&name).try_acquire().await.unwrap() {
                    return guard;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        // `other` may have won the lock file from the stalled step, which then queued behind it:
        // the clean-up removes that entry once the step ended (at once, not after a TTL).
        let mut entries = Vec::new();
        for _ in 0..50 {
            entries = h.look.entries(locksmith_core::Family::Mutex, &lock_name).unwrap();
            if entries.len() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            entries.len(),
            1,
            "round {round}: the given-up waiter is still in line after 1 s: {entries:?}"
        );
        got.release().await.unwrap();
    }
}

/// A `try` never waits behind another program's `flock` of the lock file (`flock(1)` on it, a
/// lock-file library, a process paused in its step) for longer than a step takes: it answers
/// "held" within about a second, and its thread is free (it waited for the whole `flock`, and
/// `locksmith try` then failed after the request timeout as an unavailable backend, exit 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_never_waits_behind_another_programs_flock() {
    let h = FileHarness::new();
    let name = locksmith_core::conformance::unique_name("flocked");
    let lock_name = LockName::new(&name).unwrap();
    let lock_file = h
        .look
        .state_path(locksmith_core::Family::Mutex, &lock_name)
        .with_extension("lock");
    let locker = h.locker().await;
    let foreign = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_file)
        .unwrap();
    rustix::fs::flock(&foreign, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let started = Instant::now();
    let tried = locker.lock(&name).try_acquire().await;
    let took = started.elapsed();
    assert!(matches!(tried, Ok(None)), "{tried:?}");
    assert!(took < Duration::from_secs(3), "the try waited {took:?}");
    // The program lets go: the lock is free, and nothing of the try was left.
    drop(foreign);
    let guard = locker.lock(&name).try_acquire().await.unwrap();
    assert!(guard.is_some(), "free once the foreign flock is gone");
    assert_eq!(
        h.look.entries(locksmith_core::Family::Mutex, &lock_name).unwrap().len(),
        1
    );
}

/// A state file whose fencing counter has no room for another token (written by something else,
/// or edited by hand) is refused as corrupt: the next token must never wrap below earlier ones
/// (in a release build `u64::MAX + 1` wrapped to 0 and the token fell back to the clock).
#[tokio::test]
async fn a_fencing_counter_without_room_is_refused() {
    let h = FileHarness::new();
    let name = locksmith_core::conformance::unique_name("counter");
    let lock_name = LockName::new(&name).unwrap();
    let locker = h.locker().await;
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let token = guard.fencing_token();
    guard.release().await.expect("release");
    let path = h.look.state_path(locksmith_core::Family::Mutex, &lock_name);
    // Written back as a JSON state file (format 1, which is still read).
    let text = (h.look.state_json(locksmith_core::Family::Mutex, &lock_name))
        .expect("the state file")
        .expect("a state file");
    let full = text.replace(
        &format!("\"last_token\":{token}"),
        &format!("\"last_token\":{}", u64::MAX),
    );
    assert_ne!(full, text, "the counter is in the state file: {text}");
    std::fs::write(&path, full).expect("write the state file");
    let refused = locker.lock(&name).try_acquire().await;
    let message = format!("{refused:?}");
    assert!(refused.is_err() && message.contains("no room"), "{message}");
}

/// Bug: one state file that could not be read (emptied by hand, by another program) failed
/// `list` for the whole directory. It is left out now, and the other locks are listed; its own
/// lock's calls still refuse it with what to do.
#[tokio::test]
async fn list_leaves_out_a_state_file_it_cannot_read() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let (good, bad) = ("listing/good", "listing/bad");
    let held = locker.lock(good).acquire().await.expect("acquire");
    locker
        .lock(bad)
        .acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    let path = h
        .look
        .state_path(locksmith_core::Family::Mutex, &LockName::new(bad).unwrap());
    std::fs::write(&path, b"").expect("empty the state file");
    let listed = locker.list("listing/").await.expect("list");
    assert!(listed.iter().any(|l| l.name == good), "{listed:?}");
    let refused = format!("{:?}", locker.lock(bad).try_acquire().await);
    assert!(refused.contains("not a locksmith state file"), "{refused}");
    held.release().await.expect("release");
}

/// Bug: a holder's liveness file that another process could not open for any reason counted as
/// a dead holder's (only a missing file or a link in its place says that): that process pruned the
/// live holder and took its lock, and the holder was told only at its next renewal. In the field
/// the open fails for a process out of descriptors (one with a thousand lockers soon is) or
/// without the right to read; here a socket stands in the file's place (`ENXIO`, even as root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_liveness_file_cannot_be_opened_counts_as_alive() {
    let h = FileHarness::new();
    let name = locksmith_core::conformance::unique_name("unopenable");
    let mut holder = ChildProcess::spawn(&format!("hold {} {name} 60000", h.url()));
    assert!(holder.says(SAYS).await.starts_with("held "));
    let owners = h.dir.join(".owners");
    let mut sockets = Vec::new();
    for file in std::fs::read_dir(&owners).unwrap().flatten() {
        std::fs::remove_file(file.path()).unwrap();
        sockets.push(std::os::unix::net::UnixListener::bind(file.path()).unwrap());
    }
    assert!(!sockets.is_empty(), "no liveness file");
    let other = h.locker().await;
    let got = other.lock(&name).try_acquire().await;
    assert!(
        matches!(got, Ok(None)),
        "a holder whose liveness file could not be opened lost its lock: {got:?}"
    );
}

/// Bug: an entry whose owner id locksmith could never have written (a state file written by
/// hand or damaged; here 300 characters, too long for a file name) could not be checked, and
/// counted as alive for good: its lock was held forever. Such an owner is dead now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_with_an_owner_id_locksmith_never_writes_is_dead() {
    let h = FileHarness::new();
    let name = locksmith_core::conformance::unique_name("bad-owner");
    let holder = h.locker().await;
    let _guard = (holder.lock(&name).ttl(Duration::from_secs(60)).acquire().await).expect("acquire");
    let path = h
        .look
        .state_path(locksmith_core::Family::Mutex, &LockName::new(&name).unwrap());
    let json = h
        .look
        .state_json(locksmith_core::Family::Mutex, &LockName::new(&name).unwrap());
    let mut state: serde_json::Value = serde_json::from_str(&json.unwrap().unwrap()).unwrap();
    state["entries"][0]["owner"] = serde_json::Value::String("x".repeat(300));
    std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
    let other = h.locker().await;
    let got = other.lock(&name).ttl(Duration::from_secs(60)).try_acquire().await;
    assert!(
        matches!(got, Ok(Some(_))),
        "an entry of an owner id locksmith never writes kept the lock (TTL 60 s): {got:?}"
    );
}

/// A holder killed in the middle of its guarded writes (values of 256 KiB, one after another:
/// the kill lands inside one) leaves a whole value, the one it last wrote or the one it was
/// writing, never a mix of two or a cut one; the next holder reads it and writes over it (the
/// killed write's temporary file in its way is removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_mid_write_leaves_a_whole_value() {
    let h = FileHarness::new();
    let name = locksmith_core::conformance::unique_name("killed_writer");
    let key = format!("/processes/{name}");
    let locker = h.locker().await;
    for round in 0..5 {
        let mut child = ChildProcess::spawn(&format!("write {} {name} {key}", h.url()));
        let mut last = 0;
        for _ in 0..=round {
            last = child
                .says(SAYS)
                .await
                .strip_prefix("wrote ")
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
        child.kill().await;
        let guard = within(
            Duration::from_secs(10),
            "the killed writer's lock",
            locker.lock(&name).acquire(),
        )
        .await
        .unwrap();
        let value = guard.guarded().get(&key).await.unwrap().expect("a value");
        assert_eq!(value.len(), WRITTEN_LEN, "round {round}: a cut value");
        let written = &value[..8];
        assert!(
            value.chunks(8).all(|c| c == written),
            "round {round}: a mix of two values"
        );
        // The last one it said it wrote, or one after it (written before it could say so).
        let written = u64::from_le_bytes(written.try_into().unwrap());
        assert!(
            written >= last,
            "round {round}: write {written}, after the child said it wrote {last}"
        );
        guard
            .guarded()
            .put(&key, vec![250u8; 10])
            .await
            .expect("a put after the kill");
        assert_eq!(guard.guarded().get(&key).await.unwrap(), Some(vec![250u8; 10]));
        guard.release().await.unwrap();
    }
    let data: Vec<String> = std::fs::read_dir(h.dir.join(".data"))
        .unwrap()
        .map(|f| f.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(data.len(), 2, "the value and its lock file, no more: {data:?}");
}
