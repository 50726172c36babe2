//! What is particular to etcd in the semaphore, read-write lock and election (the conformance
//! suite checks their semantics): the keys and values, the requests each operation costs, one
//! waiter woken per released permit, and an election observer that ends with its backend (the
//! outage it rides out is the conformance suite's). Against `LOCKSMITH_TEST_ETCD`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{LockGuard, Locker};
use locksmith_etcd::{Config, EtcdBackend, EtcdStats};

const PATIENCE: Duration = Duration::from_secs(30);

fn base() -> String {
    common::env_url("LOCKSMITH_TEST_ETCD")
}

/// A locker on `url` and its backend, whose request counters the test reads.
async fn counted_on(url: &str) -> (Arc<EtcdBackend>, Locker) {
    common::init_tracing();
    let config = Config::from_url(&BackendUrl::parse(url).expect("url")).expect("config");
    let backend = Arc::new(EtcdBackend::connect(config).await.expect("connect"));
    (backend.clone(), Locker::from_arc(backend))
}

async fn counted() -> (Arc<EtcdBackend>, Locker) {
    counted_on(&base()).await
}

fn delta(before: EtcdStats, after: EtcdStats) -> (u64, u64) {
    (
        after.transactions - before.transactions,
        after.watch_requests - before.watch_requests,
    )
}

/// Checks the transactions `backend` sent since `before`, and that it opened no waiter watch (a
/// lock held longer than 100 ms, on a slow test machine, gets its held-key watch: a create and a
/// cancel).
fn assert_txns(backend: &EtcdBackend, before: EtcdStats, expected: u64, what: &str) {
    let (txns, watches) = delta(before, backend.stats());
    assert_eq!(txns, expected, "{what}: transactions");
    assert!(watches == 0 || watches == 2, "{what}: {watches} watch requests");
}

/// The value etcd holds for a guard's key; checks that its fencing token is the key's create
/// revision.
async fn value_of(admin: &etcd_client::Client, guard: &LockGuard) -> String {
    let key = &guard.lease().holder_id;
    let resp = admin.kv_client().get(key.as_str(), None).await.expect("get");
    let kv = resp.kvs().first().unwrap_or_else(|| panic!("no key {key}"));
    assert_eq!(guard.fencing_token(), kv.create_revision() as u64, "{key}");
    String::from_utf8_lossy(kv.value()).into_owned()
}

/// Each family has its own prefix (`<namespace>/<encoded name><suffix>/`) and says in the value
/// what an entry is: the permit count, `read` or `write`, the campaign value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_values_per_kind() {
    let name = unique_name("kinds");
    let encoded = LockName::new(&name).unwrap().encoded().to_owned();
    let admin = common::admin(&base()).await;
    let (_, locker) = counted().await;
    let permit = locker.semaphore(&name, 3).acquire().await.expect("permit");
    assert!(permit
        .lease()
        .holder_id
        .starts_with(&format!("locksmith/{encoded}.sem/")));
    assert_eq!(value_of(&admin, &permit).await, "3");
    let read = locker.rwlock(&name).read().acquire().await.expect("read");
    assert!(read.lease().holder_id.starts_with(&format!("locksmith/{encoded}.rw/")));
    assert_eq!(value_of(&admin, &read).await, "read");
    read.release().await.expect("release");
    let write = locker.rwlock(&name).write().acquire().await.expect("write");
    assert_eq!(value_of(&admin, &write).await, "write");
    let lead = locker
        .election(&name)
        .campaign("10.0.0.7:8080")
        .acquire()
        .await
        .expect("lead");
    assert!(lead
        .guard()
        .lease()
        .holder_id
        .starts_with(&format!("locksmith/{encoded}.elect/")));
    assert_eq!(value_of(&admin, lead.guard()).await, "10.0.0.7:8080");
    let leader = locker
        .election(&name)
        .leader()
        .await
        .expect("leader")
        .expect("a leader");
    assert_eq!(leader.holder_id, lead.guard().lease().holder_id);
    for guard in [permit, write] {
        guard.release().await.expect("release");
    }
    lead.resign().await.expect("resign");
}

/// An uncontended acquire + release of every kind is two transactions and no watch; a
/// `try_acquire` that fails writes nothing: one transaction (a permit's second transaction is
/// only sent when a permit is free).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_operation() {
    let name = unique_name("costs");
    let (backend, locker) = counted().await;
    let (_, other) = counted().await;
    let before = backend.stats();
    let permit = locker.semaphore(&name, 2).acquire().await.expect("permit");
    permit.release().await.expect("release");
    assert_txns(&backend, before, 2, "semaphore acquire + release");
    let before = backend.stats();
    let read = locker.rwlock(&name).read().acquire().await.expect("read");
    read.release().await.expect("release");
    assert_txns(&backend, before, 2, "read acquire + release");
    let before = backend.stats();
    let write = locker.rwlock(&name).write().acquire().await.expect("write");
    write.release().await.expect("release");
    assert_txns(&backend, before, 2, "write acquire + release");
    let before = backend.stats();
    let lead = locker.election(&name).campaign("v").acquire().await.expect("lead");
    lead.resign().await.expect("resign");
    assert_txns(&backend, before, 2, "campaign + resign");

    // A semaphore with one permit in use: a try takes the second one in two transactions.
    let held = other.semaphore(&name, 2).acquire().await.expect("permit");
    let before = backend.stats();
    let second = locker
        .semaphore(&name, 2)
        .try_acquire()
        .await
        .expect("try")
        .expect("free");
    assert_txns(&backend, before, 2, "try on a half-used semaphore");
    // Full: one transaction, nothing written.
    let before = backend.stats();
    assert!(locker.semaphore(&name, 2).try_acquire().await.expect("try").is_none());
    assert_txns(&backend, before, 1, "try on a full semaphore");
    let admin = common::admin(&base()).await;
    let prefix = format!("locksmith/{}.sem/", LockName::new(&name).unwrap().encoded());
    assert_eq!(
        common::keys_under(&admin, &prefix).await.len(),
        2,
        "the failed try wrote"
    );
    // Readers: one transaction either way.
    let writer = other.rwlock(&name).write().acquire().await.expect("write");
    let before = backend.stats();
    assert!(locker.rwlock(&name).read().try_acquire().await.expect("try").is_none());
    assert_txns(&backend, before, 1, "try to read beside a writer");
    writer.release().await.expect("release");
    let reader = other.rwlock(&name).read().acquire().await.expect("read");
    let before = backend.stats();
    let shared = locker
        .rwlock(&name)
        .read()
        .try_acquire()
        .await
        .expect("try")
        .expect("readers share");
    assert_txns(&backend, before, 1, "try to read beside a reader");
    for guard in [held, second, reader, shared] {
        guard.release().await.expect("release");
    }
}

/// A released permit wakes one waiter (the first); the waiters further back send nothing: no
/// herd. The first waiter then touches its key, which wakes the one behind it (and only it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_permit_wakes_one_waiter() {
    let name = unique_name("no_herd");
    let key = LockName::new(&name).unwrap();
    let (_, holder) = counted().await;
    let held = holder.semaphore(&name, 1).acquire().await.expect("permit");
    let admin = common::admin(&base()).await;
    let prefix = format!("locksmith/{}.sem/", key.encoded());
    let mut waiters = Vec::new();
    for i in 0..4 {
        let (backend, locker) = counted().await;
        let name = name.clone();
        let task = tokio::spawn(async move { locker.semaphore(&name, 1).acquire().await.expect("permit") });
        within(PATIENCE, "a waiter queued", async {
            while common::keys_under(&admin, &prefix).await.len() < i + 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        waiters.push((backend, task));
    }
    // Let every waiter settle on its watch.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before: Vec<EtcdStats> = waiters.iter().map(|(b, _)| b.stats()).collect();
    held.release().await.expect("release");
    let (first_backend, first) = waiters.remove(0);
    let first = within(PATIENCE, "the first waiter", first).await.expect("task");
    within(PATIENCE, "the second waiter reading after the touch", async {
        while delta(before[1], waiters[0].0.stats()).0 < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (txns, _) = delta(before[0], first_backend.stats());
    assert_eq!(txns, 2, "the first waiter: one read, one touch");
    let (second_txns, _) = delta(before[1], waiters[0].0.stats());
    assert_eq!(
        second_txns, 2,
        "the second waiter: a read after the touch, a confirming read"
    );
    for (i, (backend, task)) in waiters.iter().enumerate().skip(1) {
        assert_eq!(
            delta(before[i + 1], backend.stats()),
            (0, 0),
            "waiter {} woke up",
            i + 2
        );
        assert!(!task.is_finished());
    }
    first.release().await.expect("release");
    for (_, task) in waiters {
        let permit = within(PATIENCE, "the next waiter", task).await.expect("task");
        permit.release().await.expect("release");
    }
}

/// Readers waiting behind a writer all get in when it releases, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_behind_a_writer_get_in_together() {
    let name = unique_name("readers_together");
    let (_, writer_locker) = counted().await;
    let writer = writer_locker.rwlock(&name).write().acquire().await.expect("write");
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (_, locker) = counted().await;
        let name = name.clone();
        readers.push(tokio::spawn(async move {
            locker.rwlock(&name).read().acquire().await.expect("read")
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(readers.iter().all(|r| !r.is_finished()), "a reader beside the writer");
    writer.release().await.expect("release");
    let mut held = Vec::new();
    for reader in readers {
        held.push(
            within(PATIENCE, "a reader after the writer", reader)
                .await
                .expect("task"),
        );
    }
    assert!(held.iter().all(LockGuard::is_held));
    for guard in held {
        guard.release().await.expect("release");
    }
}

/// An observation ends once its backend is dropped (the shared
/// `election_observer_rides_out_outages` checks the outage; this part is not shared: the Redis
/// backend's observation outlives its locker, and `mem://` stores outlive their lockers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_ends_with_its_backend() {
    let name = unique_name("observe_end");
    let (_, watcher) = counted().await;
    let (_, a) = counted().await;
    let lead = a.election(&name).campaign("one").acquire().await.expect("lead");
    let mut observed = watcher.election(&name).observe().await.expect("observe");
    assert_eq!(observed.leader().map(|l| l.value), Some("one".into()));
    drop(watcher);
    within(PATIENCE, "the observer ending with its backend", async {
        while observed.changed().await.is_ok() {}
    })
    .await;
    lead.resign().await.expect("resign");
}
