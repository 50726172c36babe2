//! `locksmith::blocking` from synchronous code (plain `#[test]`s, no runtime of the test's own) on
//! `mem://`, `file://` and Redis (`LOCKSMITH_TEST_REDIS`), and its refusal inside async code.
//! Run with `cargo test -p locksmith --all-features --test blocking`.
#![cfg(feature = "blocking")]

use std::time::{Duration, Instant};

use locksmith::blocking;
use locksmith::driver::LockName;
use locksmith::LockError;

/// A unique lock name.
fn unique(test: &str) -> String {
    locksmith_core::conformance::unique_name(test)
}

/// Polls `condition` every 20 ms for at most `limit`.
fn eventually(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Everything of the blocking API against the backend at `url`, whose `delete` removes a
/// mutex's holder behind its back (as an operator would); without it, the steps that need a
/// removal are left out.
fn blocking_api_on(url: &str, delete: Option<&dyn Fn(&str)>) {
    let ttl = Duration::from_millis(500);
    let a = blocking::connect(url).expect("connect");
    let b = blocking::connect(url).expect("connect");

    // Held while this thread is busy for three TTLs: the watchdog renews on the locker's runtime.
    let name = unique("blocking_busy");
    let guard = a
        .lock(&name)
        .ttl(ttl)
        .timeout(Duration::from_secs(5))
        .acquire()
        .expect("acquire");
    std::thread::sleep(ttl * 3);
    assert!(guard.is_held(), "the lease ran out while the thread was busy");
    assert!(
        b.lock(&name).try_acquire().expect("try").is_none(),
        "taken by another while held"
    );
    let first = guard.fencing_token();
    guard.release().expect("release");
    let other = b.lock(&name).try_acquire().expect("try").expect("free after release");
    assert!(other.fencing_token() > first);
    drop(other); // released before drop returns
    let again = a.lock(&name).try_acquire().expect("try");
    assert!(again.is_some(), "still held after the guard was dropped");

    // Re-entry: refused at once (a 30 s timeout is not waited for).
    let refused = a.lock(&name).timeout(Duration::from_secs(30)).acquire();
    assert!(
        matches!(&refused, Err(LockError::WouldDeadlock { name: n, .. }) if *n == name),
        "{refused:?}"
    );
    drop(again);

    // wait_lost: nothing while held; the reason once removed behind its back.
    let name = unique("blocking_lost");
    let guard = a.lock(&name).ttl(ttl).acquire().expect("acquire");
    assert_eq!(guard.wait_lost(Duration::from_millis(50)).expect("wait"), None);
    if let Some(delete) = delete {
        delete(&name);
        let reason = guard.wait_lost(Duration::from_secs(15)).expect("wait");
        assert!(reason.is_some(), "lost() never fired after the lock was removed");
        assert!(!guard.is_held());
        assert!(matches!(guard.release(), Err(LockError::NotHeld { .. })));
    } else {
        guard.release().expect("release");
    }

    // run: the value when the lock stayed held, released after it.
    let name = unique("blocking_run");
    let value = a
        .lock(&name)
        .ttl(ttl)
        .run(|guard| {
            assert!(b.lock(guard.name()).try_acquire().expect("try").is_none());
            guard.fencing_token()
        })
        .expect("run");
    assert!(value > 0);
    let free = b.lock(&name).try_acquire().expect("try");
    assert!(free.is_some(), "held after run returned");
    drop(free);

    // run whose lock is lost while the work runs: Lost, not the work's value.
    if let Some(delete) = delete {
        let answer = a.lock(&name).ttl(ttl).run(|guard| {
            delete(guard.name());
            let start = Instant::now();
            while guard.is_held() && start.elapsed() < Duration::from_secs(15) {
                std::thread::sleep(Duration::from_millis(20));
            }
            "the work's value"
        });
        assert!(
            matches!(&answer, Err(LockError::Lost { name: n, .. }) if *n == name),
            "{answer:?}"
        );
    }

    // run releases when the work panics.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = a.lock(&name).run(|_| panic!("the work panicked"));
    }));
    assert!(panicked.is_err());
    let free = b.lock(&name).try_acquire().expect("try");
    assert!(free.is_some(), "held after the work panicked");
    drop(free);

    // Several at once, all or none.
    let (x, y) = (unique("blocking_x"), unique("blocking_y"));
    let both = a.lock_all([y.clone(), x.clone()]).ttl(ttl).acquire().expect("lock_all");
    let mut sorted = vec![x.clone(), y.clone()];
    sorted.sort();
    assert_eq!(both.names(), sorted);
    assert!(both.fencing_token(&x).is_some());
    assert!(b.lock_all([x.clone(), y.clone()]).try_acquire().expect("try").is_none());
    assert!(
        b.lock(&x).try_acquire().expect("try").is_none(),
        "a part of a failed try stayed held"
    );
    both.release().expect("release");
    let both = b.lock_all([x.clone(), y.clone()]).try_acquire().expect("try");
    assert!(both.is_some());
    drop(both);
    let sum = a
        .lock_all([x.clone(), y.clone()])
        .run(|set| set.names().len())
        .expect("run");
    assert_eq!(sum, 2);

    // A semaphore, a read-write lock, an election.
    let name = unique("blocking_kinds");
    let p1 = a.semaphore(&name, 2).acquire().expect("permit");
    let p2 = a.semaphore(&name, 2).acquire().expect("permit");
    assert!(b.semaphore(&name, 2).try_acquire().expect("try").is_none());
    drop((p1, p2));
    let rw = a.rwlock(&name);
    let r1 = rw.read().acquire().expect("read");
    let r2 = b.rwlock(&name).read().acquire().expect("read");
    assert!(b.rwlock(&name).write().try_acquire().expect("try").is_none());
    drop((r1, r2));
    let leading = a.election(&name).campaign("a").acquire().expect("campaign");
    assert_eq!(
        b.election(&name).leader().expect("leader").expect("a leader").value,
        "a"
    );
    assert!(b.election(&name).campaign("b").try_acquire().expect("try").is_none());
    assert!(leading.is_leader());
    leading.resign().expect("resign");

    // shutdown releases what is still held.
    let name = unique("blocking_shutdown");
    let held = a.lock(&name).acquire().expect("acquire");
    a.shutdown().expect("shutdown");
    assert!(!held.is_held());
    let after = b.lock(&name).try_acquire().expect("try");
    assert!(after.is_some(), "held after its locker was shut down");
    drop(after);
    drop(held);
    b.shutdown().expect("shutdown");
}

#[test]
fn blocking_api_on_mem() {
    let store = format!("blocking-{:016x}", rand_u64());
    let backend = locksmith::MemoryBackend::shared(&store);
    let remove = |name: &str| {
        assert!(
            backend.force_remove(&LockName::new(name).expect("name")),
            "no holder to remove"
        );
    };
    blocking_api_on(&format!("mem://{store}"), Some(&remove));
}

#[cfg(feature = "file")]
#[test]
fn blocking_api_on_file() {
    let dir = std::env::temp_dir().join(format!("locksmith-blocking-{:016x}", rand_u64()));
    let url = format!("file://{}", dir.display());
    let look = locksmith_file::FileBackend::connect(&locksmith::driver::BackendUrl::parse(&url).expect("url"))
        .expect("connect");
    blocking_api_on(
        &url,
        Some(&|name: &str| {
            let path = look.state_path(locksmith::Family::Mutex, &LockName::new(name).expect("name"));
            std::fs::remove_file(path).expect("no state file to remove");
        }),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "redis")]
#[test]
fn blocking_api_on_redis() {
    let url = locksmith_core::conformance::env_url("LOCKSMITH_TEST_REDIS");
    let parsed = locksmith::driver::BackendUrl::parse(&url).expect("url");
    let client = redis::Client::open(url.as_str()).expect("client");
    blocking_api_on(
        &url,
        Some(&|name: &str| {
            let key = locksmith_redis::LockKeys::for_url(&parsed, &LockName::new(name).expect("name"))
                .expect("keys")
                .lock;
            let mut conn = client.get_connection().expect("connect");
            let deleted: i64 = redis::cmd("DEL").arg(&key).query(&mut conn).expect("DEL");
            assert_eq!(deleted, 1, "no holder to remove");
        }),
    );
}

/// The blocking API on etcd, ZooKeeper, PostgreSQL and MySQL (without removals behind a holder's back:
/// their backends' own harnesses know how; the loss path is the same code as on Redis).
#[cfg(feature = "etcd")]
#[test]
fn blocking_api_on_etcd() {
    blocking_api_on(&locksmith_core::conformance::env_url("LOCKSMITH_TEST_ETCD"), None);
}

#[cfg(feature = "zk")]
#[test]
fn blocking_api_on_zk() {
    blocking_api_on(&locksmith_core::conformance::env_url("LOCKSMITH_TEST_ZK"), None);
}

#[cfg(feature = "postgres")]
#[test]
fn blocking_api_on_postgres() {
    blocking_api_on(&locksmith_core::conformance::env_url("LOCKSMITH_TEST_POSTGRES"), None);
}

#[cfg(feature = "mysql")]
#[test]
fn blocking_api_on_mysql() {
    blocking_api_on(&locksmith_core::conformance::env_url("LOCKSMITH_TEST_MYSQL"), None);
}

/// A `Dual` locker built by `from_async`: a lock taken through the blocking API is held in both
/// stores, and released from both.
#[test]
fn dual_through_from_async() {
    let (old, new) = (format!("old-{:016x}", rand_u64()), format!("new-{:016x}", rand_u64()));
    let urls = (format!("mem://{old}"), format!("mem://{new}"));
    let locker = blocking::from_async(|| async move {
        let old = locksmith::connect(&urls.0).await?;
        let new = locksmith::connect(&urls.1).await?;
        Ok(locksmith::Dual::locker(&old, &new))
    })
    .expect("from_async");
    let (old, new) = (
        blocking::connect(&format!("mem://{old}")).expect("connect"),
        blocking::connect(&format!("mem://{new}")).expect("connect"),
    );
    let name = unique("blocking_dual");
    let guard = locker.lock(&name).acquire().expect("acquire");
    assert!(
        old.lock(&name).try_acquire().expect("try").is_none(),
        "not held in the old store"
    );
    assert!(
        new.lock(&name).try_acquire().expect("try").is_none(),
        "not held in the new store"
    );
    guard.release().expect("release");
    assert!(old.lock(&name).try_acquire().expect("try").is_some());
    assert!(new.lock(&name).try_acquire().expect("try").is_some());
}

/// Called inside async code, every blocking call answers `BlockingInAsync` (no panic, no
/// deadlock), and a guard dropped there is released in the background.
#[test]
fn refused_inside_async_code() {
    let locker = blocking::connect("mem://").expect("connect");
    let name = unique("blocking_async");
    let guard = locker.lock(&name).acquire().expect("acquire");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let connect = blocking::connect("mem://");
        assert!(
            matches!(connect, Err(LockError::BlockingInAsync { call: "connect" })),
            "{connect:?}"
        );
        let acquire = locker.lock("other").acquire();
        assert!(matches!(acquire, Err(LockError::BlockingInAsync { .. })), "{acquire:?}");
        let wait = guard.wait_lost(Duration::from_millis(10));
        assert!(matches!(wait, Err(LockError::BlockingInAsync { .. })), "{wait:?}");
        drop(guard); // released in the background, on the locker's runtime
    });
    drop(runtime);
    eventually(
        Duration::from_secs(10),
        "the guard dropped in async code to be released",
        || locker.lock(&name).try_acquire().expect("try").is_some(),
    );
}

/// The same from a `#[tokio::test]`: a locker dropped there does not panic either.
#[tokio::test]
async fn refused_in_a_tokio_test() {
    let answer = blocking::connect("mem://");
    assert!(matches!(answer, Err(LockError::BlockingInAsync { .. })), "{answer:?}");
    let locker = std::thread::spawn(|| blocking::connect("mem://").expect("connect"))
        .join()
        .expect("thread");
    let answer = locker.lock("x").try_acquire();
    assert!(matches!(answer, Err(LockError::BlockingInAsync { .. })), "{answer:?}");
    drop(locker);
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.finish()
}
