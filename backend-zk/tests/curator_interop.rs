//! locksmith and the real Apache Curator share read-write locks, semaphores and elections on a
//! real ZooKeeper (`LOCKSMITH_TEST_ZK`): Curator's `InterProcessReadWriteLock`,
//! `InterProcessSemaphoreV2` and `LeaderLatch`, run in a JVM (`tests/curator/CuratorPeer.java`,
//! Debian's Curator 5.4), on the paths locksmith uses — `<namespace>/<encoded name>.rw`, `.sem`,
//! `.elect` — exclude, count and follow locksmith's clients, and locksmith theirs.

mod common;
mod curator;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use curator::Peer;
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::LockName;
use locksmith_core::{Family, Locker};
use zookeeper_client as zk;

/// The bound of every step that should be quick (a grant after a release, a JVM's answer).
const LIMIT: Duration = Duration::from_secs(30);
/// How long a waiter is watched to show that it keeps waiting.
const STILL: Duration = Duration::from_millis(500);

/// `_c_<36-character uuid>-<base><10 digits>`: a node Curator's protected mode names.
fn is_protected(path: &str, base: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some(rest) = name.strip_prefix("_c_") else {
        return false;
    };
    rest.get(36..).and_then(|t| t.strip_prefix('-')).is_some_and(|tail| {
        tail.strip_prefix(base)
            .is_some_and(|seq| seq.len() == 10 && seq.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Waits until `family`'s lock `name` has `count` entries (its contenders, or a semaphore's
/// leases and internal-lock nodes, one per contender).
async fn wait_entries(admin: &zk::Client, family: Family, name: &LockName, count: usize) {
    within(LIMIT, &format!("{count} entries of the {}", family.name()), async {
        while common::entries(admin, family, name).await.len() != count {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

async fn setup(test: &str) -> (zk::Client, Locker, String, LockName) {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let admin = common::admin(&base).await;
    let locker = common::locker(&base, "session_timeout=5s").await;
    let name = unique_name(test);
    let key = LockName::new(&name).unwrap();
    (admin, locker, name, key)
}

/// A Curator writer holds: a locksmith reader waits for it. Then a locksmith reader holds: a
/// Curator writer waits, and while it waits a later locksmith reader waits too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_writer_and_locksmith_readers_exclude_each_other() {
    let (admin, locker, name, key) = setup("curator_writer").await;
    let path = common::family_path(Family::RwLock, &key);

    let mut writer = Peer::start(&["write", &path]).await;
    writer.send("acquire").await;
    writer.expect("held", LIMIT).await;
    let nodes = common::children_of(&admin, &path).await;
    assert!(nodes.len() == 1 && is_protected(&nodes[0], "__WRIT__"), "{nodes:?}");
    let (_, curator_stat) = admin.get_data(&nodes[0]).await.expect("Curator's node");
    assert!(
        locker.rwlock(&name).read().try_acquire().await.expect("try").is_none(),
        "a locksmith reader got in beside a Curator writer"
    );
    let reader = tokio::spawn({
        let (locker, name) = (locker.clone(), name.clone());
        async move { locker.rwlock(&name).read().acquire().await }
    });
    wait_entries(&admin, Family::RwLock, &key, 2).await;
    tokio::time::sleep(STILL).await;
    assert!(
        !reader.is_finished(),
        "a locksmith reader got in beside a Curator writer"
    );
    writer.send("release").await;
    writer.expect("released", LIMIT).await;
    let read = within(LIMIT, "the locksmith reader after Curator's writer", reader)
        .await
        .expect("task")
        .expect("read");
    assert!(
        is_protected(&read.lease().holder_id, "__READ__"),
        "{}",
        read.lease().holder_id
    );
    assert!(read.fencing_token() > curator_stat.czxid as u64);

    writer.send("try 300").await;
    assert_eq!(
        writer.next_line(LIMIT).await.as_deref(),
        Some("busy"),
        "Curator's writer got in beside a reader"
    );
    writer.send("acquire").await;
    wait_entries(&admin, Family::RwLock, &key, 2).await;
    assert!(
        writer.next_line(STILL).await.is_none(),
        "Curator's writer got in beside a reader"
    );
    assert!(
        locker.rwlock(&name).read().try_acquire().await.expect("try").is_none(),
        "a locksmith reader went ahead of a waiting Curator writer"
    );
    read.release().await.expect("release");
    writer.expect("held", LIMIT).await;
    writer.close().await;
    wait_entries(&admin, Family::RwLock, &key, 0).await;
}

/// A locksmith writer holds: a Curator reader waits. Then Curator and locksmith readers share the
/// lock, and a locksmith writer waits for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locksmith_writer_and_curator_readers_exclude_each_other() {
    let (admin, locker, name, key) = setup("curator_reader").await;
    let path = common::family_path(Family::RwLock, &key);

    let write = locker.rwlock(&name).write().acquire().await.expect("write");
    assert!(
        is_protected(&write.lease().holder_id, "__WRIT__"),
        "{}",
        write.lease().holder_id
    );
    let mut reader = Peer::start(&["read", &path]).await;
    reader.send("try 300").await;
    assert_eq!(
        reader.next_line(LIMIT).await.as_deref(),
        Some("busy"),
        "Curator's reader got in beside a writer"
    );
    reader.send("acquire").await;
    wait_entries(&admin, Family::RwLock, &key, 2).await;
    assert!(
        reader.next_line(STILL).await.is_none(),
        "Curator's reader got in beside a writer"
    );
    write.release().await.expect("release");
    reader.expect("held", LIMIT).await;

    let read = locker
        .rwlock(&name)
        .read()
        .try_acquire()
        .await
        .expect("try")
        .expect("readers of both libraries share the lock");
    let next_writer = tokio::spawn({
        let (locker, name) = (locker.clone(), name.clone());
        async move { locker.rwlock(&name).write().acquire().await }
    });
    wait_entries(&admin, Family::RwLock, &key, 3).await;
    read.release().await.expect("release");
    tokio::time::sleep(STILL).await;
    assert!(
        !next_writer.is_finished(),
        "a locksmith writer got in beside a Curator reader"
    );
    reader.send("release").await;
    reader.expect("released", LIMIT).await;
    let w = within(LIMIT, "the writer after both readers", next_writer)
        .await
        .expect("task")
        .expect("write");
    w.release().await.expect("release");
    reader.close().await;
    wait_entries(&admin, Family::RwLock, &key, 0).await;
}

/// One 2-permit semaphore, held by Curator and locksmith at once: a third client of either waits,
/// and freed permits go to the waiters in order, whichever library they use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_locksmith_share_a_semaphore_in_order() {
    let (admin, locker, name, key) = setup("curator_sem").await;
    let path = common::family_path(Family::Semaphore, &key);

    let mut first = Peer::start(&["semaphore", &path, "2"]).await;
    first.send("acquire").await;
    let curator_lease = first.expect("held", LIMIT).await;
    assert!(is_protected(&curator_lease, "lease-"), "{curator_lease}");
    let ours = locker
        .semaphore(&name, 2)
        .try_acquire()
        .await
        .expect("try")
        .expect("the second permit");
    assert!(
        is_protected(&ours.lease().holder_id, "p2-lease-"),
        "{}",
        ours.lease().holder_id
    );
    assert!(ours.lease().holder_id.starts_with(&format!("{path}/leases/")));
    assert!(
        locker.semaphore(&name, 2).try_acquire().await.expect("try").is_none(),
        "a third permit of two"
    );
    let mut second = Peer::start(&["semaphore", &path, "2"]).await;
    second.send("try 300").await;
    assert_eq!(
        second.next_line(LIMIT).await.as_deref(),
        Some("busy"),
        "Curator took a third permit of two"
    );

    // A locksmith waiter, then a Curator waiter behind it (in the internal lock, `locks/`).
    let waiter = tokio::spawn({
        let (locker, name) = (locker.clone(), name.clone());
        async move { locker.semaphore(&name, 2).acquire().await }
    });
    wait_entries(&admin, Family::Semaphore, &key, 3).await;
    second.send("acquire").await;
    within(LIMIT, "Curator's waiter queueing in the internal lock", async {
        while common::children_of(&admin, &format!("{path}/locks")).await.len() != 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    first.send("release").await;
    first.expect("released", LIMIT).await;
    let third = within(LIMIT, "the locksmith waiter, first in line", waiter)
        .await
        .expect("task")
        .expect("a permit");
    assert!(
        second.next_line(STILL).await.is_none(),
        "Curator's waiter overtook, or a third permit"
    );
    ours.release().await.expect("release");
    second.expect("held", LIMIT).await;
    assert_eq!(common::children_of(&admin, &format!("{path}/leases")).await.len(), 2);
    third.release().await.expect("release");
    second.close().await;
    first.close().await;
    wait_entries(&admin, Family::Semaphore, &key, 0).await;
}

/// Two Curator clients and two locksmith clients take and give back permits of one 2-permit
/// semaphore, over and over: never more than 2 are inside at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_shared_with_curator_never_has_three_holders() {
    const ROUNDS: usize = 8;
    let (admin, _, name, key) = setup("curator_sem_stress").await;
    let path = common::family_path(Family::Semaphore, &key);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let enter = |inside: &AtomicUsize, most: &AtomicUsize, who: &str| {
        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(now, Ordering::SeqCst);
        assert!(now <= 2, "{now} holders of a 2-permit semaphore ({who} just entered)");
    };
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..2 {
        // Curator prints `in` after it holds, prints `out` and then releases only once the test
        // answers `go`: what the test counts as held lies within the real hold, so an overlap
        // seen here is a real one. (Releasing right after `out`, as it did, let a locksmith
        // client enter before this task had read `out`: a count of 3 with no real overlap.)
        let mut peer = Peer::start(&["semaphore", &path, "2"]).await;
        let (inside, most) = (inside.clone(), most.clone());
        tasks.spawn(async move {
            peer.send(&format!("cycle {ROUNDS} 25")).await;
            loop {
                match peer.next_line(LIMIT * 4).await.as_deref() {
                    Some("in") => enter(&inside, &most, &format!("Curator {i}")),
                    Some("out") => {
                        inside.fetch_sub(1, Ordering::SeqCst);
                        peer.send("go").await;
                    }
                    Some("done") => break,
                    other => panic!("Curator {i}: unexpected {other:?}"),
                }
            }
            peer.close().await;
        });
    }
    for i in 0..2 {
        let locker = common::locker(&common::env_url("LOCKSMITH_TEST_ZK"), "session_timeout=5s").await;
        let (inside, most, name) = (inside.clone(), most.clone(), name.clone());
        tasks.spawn(async move {
            for _ in 0..ROUNDS {
                let permit = locker.semaphore(&name, 2).acquire().await.expect("a permit");
                enter(&inside, &most, &format!("locksmith {i}"));
                tokio::time::sleep(Duration::from_millis(25)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.expect("release");
            }
        });
    }
    within(LIMIT * 4, "the mixed semaphore rounds", async {
        while let Some(done) = tasks.join_next().await {
            done.expect("a client failed");
        }
    })
    .await;
    assert!(most.load(Ordering::SeqCst) >= 1);
    wait_entries(&admin, Family::Semaphore, &key, 0).await;
}

/// A Curator `LeaderLatch` leads: locksmith's `leader()` and `observe()` show its id and a
/// locksmith campaign waits. When it closes, locksmith leads, and Curator's `getLeader()` shows
/// locksmith's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_leader_latches_and_locksmith_elections_agree() {
    let (admin, locker, name, key) = setup("curator_latch").await;
    let path = common::family_path(Family::Election, &key);
    let election = locker.election(&name);

    let mut java = Peer::start(&["latch", &path, "java-1"]).await;
    java.send("acquire").await;
    let java_node = java.expect("held", LIMIT).await;
    assert!(is_protected(&java_node, "latch-"), "{java_node}");
    let (_, java_stat) = admin.get_data(&java_node).await.expect("the latch node");
    let leader = election.leader().await.expect("leader").expect("Curator leads");
    assert_eq!(
        (leader.value.as_str(), leader.term, leader.holder_id.as_str()),
        ("java-1", java_stat.czxid as u64, java_node.as_str())
    );
    let mut observed = election.observe().await.expect("observe");
    assert_eq!(observed.leader().map(|l| l.value), Some("java-1".into()));
    assert!(election.campaign("rust-1").try_acquire().await.expect("try").is_none());
    let campaign = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("rust-1").acquire().await }
    });
    wait_entries(&admin, Family::Election, &key, 2).await;
    tokio::time::sleep(STILL).await;
    assert!(!campaign.is_finished(), "locksmith leads beside Curator's leader");

    java.send("release").await;
    java.expect("released", LIMIT).await;
    let lead = within(LIMIT, "locksmith leading after Curator", campaign)
        .await
        .expect("task")
        .expect("campaign");
    assert!(lead.term() > java_stat.czxid as u64);
    assert!(is_protected(&lead.guard().lease().holder_id, "latch-"));
    let seen = within(LIMIT, "the observer seeing locksmith lead", async {
        loop {
            match observed.leader() {
                Some(l) if l.value == "rust-1" => return l,
                _ => {
                    observed.changed().await.expect("observing");
                }
            }
        }
    })
    .await;
    assert_eq!(seen.term, lead.term());
    java.send("leader").await;
    assert_eq!(
        java.expect("leader", LIMIT).await,
        "rust-1",
        "Curator's getLeader().getId()"
    );
    java.send("try 300").await;
    assert_eq!(
        java.next_line(LIMIT).await.as_deref(),
        Some("busy"),
        "Curator leads beside locksmith"
    );

    lead.resign().await.expect("resign");
    java.send("leader").await;
    assert_eq!(java.expect("leader", LIMIT).await, "-");
    java.close().await;
    wait_entries(&admin, Family::Election, &key, 0).await;
}
