//! Semaphores, read-write locks and elections on a real ZooKeeper (`LOCKSMITH_TEST_ZK`), beyond
//! the conformance suites: the nodes each kind creates (Curator's layouts), lost detection for
//! each, kazoo's read-write lock nodes, and a storm of cancelled semaphore acquires (the one of
//! the conformance suite spreads over every kind; this one is a herd on the semaphore's internal
//! lock). The election observer that rides out a cut and a session expiry is the conformance
//! suite's (`tests/conformance.rs`).

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::LockName;
use locksmith_core::{Family, LockGuard, Locker, LostReason};
use zookeeper_client as zk;

const LIMIT: Duration = Duration::from_secs(30);

fn base() -> String {
    common::env_url("LOCKSMITH_TEST_ZK")
}

async fn wait_entries(admin: &zk::Client, family: Family, name: &LockName, count: usize) {
    let mut last = Vec::new();
    let waited = tokio::time::timeout(LIMIT, async {
        loop {
            last = common::entries(admin, family, name).await;
            if last.len() == count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "{count} entries of the {} expected, still {last:?}",
        family.name()
    );
}

/// The node at `path`: its name after the parent, its data and stat.
async fn node(admin: &zk::Client, path: &str) -> (String, Vec<u8>, zk::Stat) {
    let (data, stat) = admin.get_data(path).await.unwrap_or_else(|e| panic!("{path}: {e}"));
    (path.rsplit('/').next().unwrap().to_owned(), data, stat)
}

/// `_c_<uuid>-<base><10 digits>`.
fn named(child: &str, base: &str) -> bool {
    child.len() == 3 + 36 + 1 + base.len() + 10
        && child.starts_with("_c_")
        && child[40..].starts_with(base)
        && child[40 + base.len()..].bytes().all(|b| b.is_ascii_digit())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_creates_curators_nodes() {
    let admin = common::admin(&base()).await;
    let locker = common::locker(&base(), "session_timeout=5s").await;
    let name = unique_name("layout") + "/x y";
    let key = LockName::new(&name).unwrap();
    let encoded = format!("{}/{}", common::NAMESPACE, key.encoded());

    let read = locker.rwlock(&name).read().acquire().await.expect("read");
    let (child, data, stat) = node(&admin, &read.lease().holder_id).await;
    assert_eq!(read.lease().holder_id, format!("{encoded}.rw/{child}"));
    assert!(named(&child, "__READ__"), "{child}");
    assert_eq!(stat.czxid as u64, read.fencing_token());
    assert_ne!(stat.ephemeral_owner, 0);
    assert!(String::from_utf8_lossy(&data).starts_with("locksmith pid="));
    read.release().await.expect("release");
    let write = locker.rwlock(&name).write().acquire().await.expect("write");
    let (child, _, stat) = node(&admin, &write.lease().holder_id).await;
    assert!(named(&child, "__WRIT__"), "{child}");
    assert_eq!(stat.czxid as u64, write.fencing_token());
    write.release().await.expect("release");

    let permit = locker.semaphore(&name, 3).acquire().await.expect("permit");
    let (child, _, stat) = node(&admin, &permit.lease().holder_id).await;
    assert_eq!(permit.lease().holder_id, format!("{encoded}.sem/leases/{child}"));
    assert!(named(&child, "p3-lease-"), "{child}");
    assert_eq!(stat.czxid as u64, permit.fencing_token());
    assert_ne!(stat.ephemeral_owner, 0);
    // The internal lock is let go as the permit is handed out.
    within(LIMIT, "the internal lock's node going", async {
        while !common::children_of(&admin, &format!("{encoded}.sem/locks"))
            .await
            .is_empty()
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    permit.release().await.expect("release");

    let lead = locker
        .election(&name)
        .campaign("host-1:8080")
        .acquire()
        .await
        .expect("lead");
    let (child, data, stat) = node(&admin, &lead.guard().lease().holder_id).await;
    assert_eq!(lead.guard().lease().holder_id, format!("{encoded}.elect/{child}"));
    assert!(named(&child, "latch-"), "{child}");
    assert_eq!(
        data, b"host-1:8080",
        "the value is the node's data, as Curator's participant id"
    );
    assert_eq!(stat.czxid as u64, lead.term());
    lead.resign().await.expect("resign");
    for family in Family::ALL {
        wait_entries(&admin, family, &key, 0).await;
    }
}

/// A granted permit has let go of the internal lock before `acquire` returns: another client's
/// `try_acquire` right after it finds the internal lock free and takes the next permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_leaves_the_internal_lock_free() {
    let (a, b) = (
        common::locker(&base(), "session_timeout=5s").await,
        common::locker(&base(), "session_timeout=5s").await,
    );
    let name = unique_name("sem_handover");
    for round in 0..30 {
        let first = a.semaphore(&name, 2).try_acquire().await.expect("try");
        let first = first.unwrap_or_else(|| panic!("round {round}: the first permit"));
        let second = b.semaphore(&name, 2).try_acquire().await.expect("try");
        let second = second.unwrap_or_else(|| panic!("round {round}: the second permit, right after the first"));
        assert!(second.fencing_token() > first.fencing_token());
        first.release().await.expect("release");
        second.release().await.expect("release");
    }
}

/// Deleting the node of a reader, a writer, a permit or a leader behind its back fires `lost()`,
/// and the next one in line gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_for_every_kind_when_its_node_is_deleted() {
    let admin = common::admin(&base()).await;
    let (a, b) = (
        common::locker(&base(), "session_timeout=5s").await,
        common::locker(&base(), "session_timeout=5s").await,
    );
    let name = unique_name("lost_kinds");
    let cases: [(&str, Builder); 3] = [
        ("read", |l, n| l.rwlock(n).read()),
        ("write", |l, n| l.rwlock(n).write()),
        ("permit", |l, n| l.semaphore(n, 1)),
    ];
    for (what, builder) in cases {
        let held = builder(&a, &name).acquire().await.expect(what);
        let next = tokio::spawn({
            let (b, name) = (b.clone(), name.clone());
            async move { builder(&b, &name).acquire().await }
        });
        if what != "read" {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!next.is_finished(), "{what}: the next one got in beside the holder");
        }
        deleted_behind_back(&admin, &held, what).await;
        let next: LockGuard = within(LIMIT, what, next).await.expect("task").expect(what);
        next.release().await.expect("release");
    }
    let lead = a.election(&name).campaign("a").acquire().await.expect("lead");
    let follower = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.election(&name).campaign("b").acquire().await }
    });
    deleted_behind_back(&admin, lead.guard(), "leader").await;
    let next = within(LIMIT, "the next leader", follower)
        .await
        .expect("task")
        .expect("lead");
    assert_eq!(
        a.election(&name).leader().await.expect("leader").map(|l| l.value),
        Some("b".into())
    );
    next.resign().await.expect("resign");
}

/// A request for one kind of lock `name` on a locker.
type Builder = fn(&Locker, &str) -> locksmith_core::LockBuilder;

async fn deleted_behind_back(admin: &zk::Client, guard: &LockGuard, what: &str) {
    let lost = guard.lost();
    admin
        .delete(&guard.lease().holder_id, None)
        .await
        .unwrap_or_else(|e| panic!("{what}: deleting its node: {e}"));
    let reason = within(LIMIT, &format!("{what}: lost()"), lost).await;
    assert!(matches!(reason, LostReason::LeaseGone(_)), "{what}: {reason:?}");
}

/// kazoo's `ReadLock` nodes (`<uuid hex>__rlock__<seq>`) are readers, its `WriteLock` nodes
/// (`__lock__`) writers: a locksmith reader shares with the first, a writer waits for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_readers_share_and_kazoo_writers_exclude() {
    let admin = common::admin(&base()).await;
    let locker = common::locker(&base(), "session_timeout=5s").await;
    let name = unique_name("kazoo_rw");
    let path = common::family_path(Family::RwLock, &LockName::new(&name).unwrap());
    let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
    for p in [common::NAMESPACE, &path] {
        match admin.create(p, &[], &container).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => panic!("{p}: {e}"),
        }
    }
    let ephemeral_sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let create = |kind: &'static str| {
        let (admin, path, mode) = (admin.clone(), path.clone(), ephemeral_sequential.clone());
        async move {
            let prefix = format!("{path}/5f0b2a4d5e6f708192a3b4c5d6e7f80a{kind}");
            let (_, seq) = admin.create(&prefix, b"kazoo", &mode).await.expect("kazoo node");
            format!("{prefix}{seq}")
        }
    };
    let kazoo_reader = create("__rlock__").await;
    let read = locker
        .rwlock(&name)
        .read()
        .try_acquire()
        .await
        .expect("try")
        .expect("a reader beside kazoo's reader");
    assert!(locker.rwlock(&name).write().try_acquire().await.expect("try").is_none());
    read.release().await.expect("release");
    admin.delete(&kazoo_reader, None).await.expect("kazoo's reader leaves");
    let kazoo_writer = create("__lock__").await;
    assert!(
        locker.rwlock(&name).read().try_acquire().await.expect("try").is_none(),
        "a reader beside kazoo's writer"
    );
    admin.delete(&kazoo_writer, None).await.expect("kazoo's writer leaves");
    let write = locker
        .rwlock(&name)
        .write()
        .try_acquire()
        .await
        .expect("try")
        .expect("free");
    write.release().await.expect("release");
}

/// Four hundred semaphore acquires cancelled at every point — queued in the internal lock,
/// holding it while waiting for a lease, racing grants — on connections that stay alive (each
/// holds another lock all along), leave neither an internal-lock node nor a lease behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_semaphore_acquires_leave_nothing() {
    let admin = common::admin(&base()).await;
    let name = unique_name("sem_storm");
    let key = LockName::new(&name).unwrap();
    let holder = common::locker(&base(), "session_timeout=5s").await;
    let mut lockers = Vec::new();
    let mut sides = Vec::new();
    for _ in 0..4 {
        let locker = common::locker(&base(), "session_timeout=5s").await;
        sides.push(
            locker
                .lock(unique_name("sem_storm_side"))
                .acquire()
                .await
                .expect("side lock"),
        );
        lockers.push(locker);
    }
    for busy in [true, false] {
        let held = if busy {
            Some(holder.semaphore(&name, 2).acquire().await.expect("permit"))
        } else {
            None
        };
        let mut attempts = tokio::task::JoinSet::new();
        for i in 0..200u64 {
            let (locker, name) = (lockers[i as usize % lockers.len()].clone(), name.clone());
            // Spread over 0-20 ms, some within the first round trip.
            let delay = Duration::from_micros((i * 7_919) % 20_000);
            attempts.spawn(async move {
                let attempt = locker.semaphore(&name, 2).acquire();
                if let Ok(Ok(guard)) = tokio::time::timeout(delay, attempt).await {
                    guard.release().await.expect("release");
                }
            });
        }
        within(LIMIT * 4, "the cancelled attempts", async {
            while let Some(done) = attempts.join_next().await {
                done.expect("an attempt panicked");
            }
        })
        .await;
        wait_entries(&admin, Family::Semaphore, &key, usize::from(busy)).await;
        if let Some(held) = held {
            held.release().await.expect("release");
        }
        wait_entries(&admin, Family::Semaphore, &key, 0).await;
        let free = holder.semaphore(&name, 2).try_acquire().await.expect("try");
        free.expect("free after the storm").release().await.expect("release");
    }
    for side in sides {
        assert!(side.is_held(), "a side lock was lost: {:?}", side.lost_reason());
        side.release().await.expect("release");
    }
}
