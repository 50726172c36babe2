//! Semaphores, read-write locks and elections on Redis, beyond the conformance suites: what the
//! plain layout and the quorum mode refuse, waiters that died in the queue, observers and
//! candidates whose pub/sub connections the server kills, observers that wait out dead
//! candidates, renewal batches that mix every kind, replica confirmation, and keys that do not
//! outlive their locks.
//!
//! The tests that kill pub/sub connections or count script calls use redis-q2 as a single server
//! (only `renew_batch.rs` and `quorum.rs`, other test binaries, use it) and hold [`Q2`] while
//! they run.

mod common;

use std::time::Duration;

use common::{kind_entries, server_ms, with_options, Admin};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{Family, LeaderWatch, LockError, Locker};
use locksmith_redis::KindKeys;

/// Serializes the tests of this binary that disturb or count on redis-q2.
static Q2: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn q2() -> String {
    common::quorum_hosts().remove(1)
}

fn kind_keys(url: &str, family: Family, name: &str) -> KindKeys {
    KindKeys::for_url(&BackendUrl::parse(url).unwrap(), family, &LockName::new(name).unwrap()).unwrap()
}

fn refused<T: std::fmt::Debug>(result: locksmith_core::Result<T>, why: &str) {
    match result {
        Err(LockError::InvalidOption(m)) => assert!(m.contains(why), "{m}"),
        other => panic!("expected InvalidOption ({why}), got {other:?}"),
    }
}

/// Every way of asking for a semaphore, a side of a read-write lock or an election is refused.
async fn refuses_every_kind(locker: &Locker, why: &str) {
    let name = unique_name("refused");
    refused(locker.semaphore(&name, 2).try_acquire().await, why);
    refused(
        locker
            .semaphore(&name, 2)
            .timeout(Duration::from_secs(1))
            .acquire()
            .await,
        why,
    );
    refused(locker.rwlock(&name).read().try_acquire().await, why);
    refused(locker.rwlock(&name).read().acquire().await, why);
    refused(locker.rwlock(&name).write().try_acquire().await, why);
    refused(locker.rwlock(&name).write().acquire().await, why);
    let election = locker.election(&name);
    refused(election.campaign("a").try_acquire().await, why);
    refused(election.campaign("a").acquire().await, why);
    refused(election.leader().await, why);
    refused(election.observe().await, why);
    // The mutex of the same name is served.
    let mutex = locker.lock(&name).try_acquire().await.expect("try").expect("the mutex");
    mutex.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_layout_and_quorum_mode_refuse_the_other_kinds() {
    common::init_logs();
    let plain = common::locker(&with_options(&common::redis_url(), "layout=plain")).await;
    refuses_every_kind(&plain, "layout=plain").await;
    let quorum = common::locker(&common::env_url("LOCKSMITH_TEST_REDIS_QUORUM")).await;
    refuses_every_kind(&quorum, "over-granted").await;
}

/// Puts a waiter entry at the head of `keys`' queue that stays live for `live_ms` more ms of
/// server time, as a crashed process leaves it.
async fn plant_dead_waiter(admin: &mut Admin, keys: &KindKeys, entry: &str, live_ms: i64) {
    let now = server_ms(admin).await;
    let mut pipe = redis::pipe();
    pipe.cmd("ZADD").arg(&keys.queue).arg(0).arg(entry).ignore();
    pipe.cmd("ZADD").arg(&keys.alive).arg(now + live_ms).arg(entry).ignore();
    if entry.starts_with('X') {
        pipe.cmd("ZADD").arg(&keys.writers).arg(0).arg(entry).ignore();
    }
    for key in [&keys.queue, &keys.alive, &keys.writers] {
        pipe.cmd("PEXPIRE").arg(key).arg(60_000).ignore();
    }
    let () = pipe.query_async(admin).await.expect("plant a dead waiter");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_waiters_are_skipped() {
    common::init_logs();
    let url = with_options(&common::redis_url(), "waiter_ttl=1s");
    let mut admin = common::admin_for(&url).await;
    let (a, b) = (common::locker(&url).await, common::locker(&url).await);
    let dead = "X:deadbeefdeadbeefdeadbeefdeadbeef";

    // A dead writer ahead of a reader: the reader gets in once the entry is stale, and the dead
    // writer is gone from the queue and the writers.
    let name = unique_name("dead_writer");
    let keys = kind_keys(&url, Family::RwLock, &name);
    plant_dead_waiter(&mut admin, &keys, dead, 300).await;
    assert!(a.rwlock(&name).read().try_acquire().await.expect("try").is_none());
    let r = within(
        Duration::from_secs(10),
        "a reader behind a dead writer",
        a.rwlock(&name).read().acquire(),
    )
    .await
    .expect("read");
    assert_eq!(
        kind_entries(&mut admin, &keys).await.len(),
        1,
        "the dead writer is still queued"
    );
    r.release().await.expect("release");

    // A dead permit waiter at the head of a full semaphore: a release lets the live one in.
    let name = unique_name("dead_permit");
    let keys = kind_keys(&url, Family::Semaphore, &name);
    let held = a.semaphore(&name, 1).acquire().await.expect("acquire");
    plant_dead_waiter(&mut admin, &keys, "P1:deadbeefdeadbeefdeadbeefdeadbeef", 200).await;
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.semaphore(&name, 1).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    held.release().await.expect("release");
    let got = within(Duration::from_secs(5), "a permit past a dead waiter", waiter)
        .await
        .expect("task")
        .expect("acquire");
    got.release().await.expect("release");
}

/// Every value `watch` reports from now on, in a channel (the task ends with the watch).
fn record(mut watch: LeaderWatch) -> tokio::sync::mpsc::UnboundedReceiver<Option<String>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(now) = watch.changed().await {
            if tx.send(now.map(|l| l.value)).is_err() {
                return;
            }
        }
    });
    rx
}

/// The values `seen` reports until (and with) `last`.
async fn seen_until(
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<Option<String>>,
    last: Option<&str>,
    what: &str,
) -> Vec<Option<String>> {
    let mut values = Vec::new();
    within(Duration::from_secs(10), what, async {
        while values.last().map(Option::as_deref) != Some(last) {
            values.push(seen.recv().await.expect("the observation ended"));
        }
    })
    .await;
    values
}

/// A candidate that died in line (its entry stays live for a while) delays a handover, and the
/// observer still never reports nobody in between: it keeps the old leader until the live
/// candidate behind the dead one is granted. With only a dead candidate in line, it reports
/// nobody once the entry is stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_wait_out_dead_candidates() {
    common::init_logs();
    let url = with_options(&common::redis_url(), "waiter_ttl=1s");
    let mut admin = common::admin_for(&url).await;
    let (a, b, watcher) = (
        common::locker(&url).await,
        common::locker(&url).await,
        common::locker(&url).await,
    );
    let name = unique_name("observe_dead");
    let keys = kind_keys(&url, Family::Election, &name);
    let lead = a.election(&name).campaign("a").acquire().await.expect("campaign");
    let mut observed = watcher.election(&name).observe().await.expect("observe");
    sees(&mut observed, Some("a"), "the observer sees the first leader").await;
    let mut seen = record(observed);

    // a dead candidate, then a live one
    plant_dead_waiter(&mut admin, &keys, "X:deadbeefdeadbeefdeadbeefdeadbeef", 500).await;
    let next = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.election(&name).campaign("b").acquire().await }
    });
    within(Duration::from_secs(5), "the live candidate queues", async {
        while kind_entries(&mut admin, &keys).await.len() < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    lead.resign().await.expect("resign");
    let lead = within(Duration::from_secs(10), "the live candidate leads", next)
        .await
        .expect("task")
        .expect("campaign");
    let values = seen_until(&mut seen, Some("b"), "the observer sees the live candidate").await;
    assert!(
        values.iter().all(Option::is_some),
        "between a and b the observer reported {values:?}"
    );

    // only a dead candidate in line
    plant_dead_waiter(&mut admin, &keys, "X:deadbeefdeadbeefdeadbeefdeadbeef", 300).await;
    lead.resign().await.expect("resign");
    seen_until(
        &mut seen,
        None,
        "the observer sees nobody once the dead candidate is stale",
    )
    .await;
    assert_eq!(watcher.election(&name).leader().await.expect("leader"), None);
}

/// Waits until `watch` shows `value` as leader (`None`: nobody).
async fn sees(watch: &mut LeaderWatch, value: Option<&str>, what: &str) {
    within(Duration::from_secs(10), what, async {
        while watch.leader().map(|l| l.value).as_deref() != value {
            watch.changed().await.expect("the observation ended");
        }
    })
    .await;
}

/// The server kills every pub/sub connection (`CLIENT KILL TYPE pubsub`) while an observer watches
/// and a candidate waits in line, the command connections staying up: both subscribe again, the
/// candidate leads once the leader resigns, and the observer reports it. (A cut of all of a
/// locker's connections, and two observers sharing a channel, are the conformance suite's
/// `election_observer_rides_out_outages`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_and_candidates_ride_out_killed_pubsub_connections() {
    let _q2 = Q2.lock().await;
    common::init_logs();
    let url = q2();
    let mut admin = common::admin(&url).await;
    let (watcher, a, b) = (
        common::locker(&url).await,
        common::locker(&url).await,
        common::locker(&url).await,
    );
    let name = unique_name("observe_kill");
    let election = watcher.election(&name);
    let mut observed = election.observe().await.expect("observe");
    let value = "10.0.0.1:80 the: first\nleader ✓";
    let lead = a.election(&name).campaign(value).acquire().await.expect("campaign");
    sees(&mut observed, Some(value), "the observer sees the leader").await;
    let next = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.election(&name).campaign("b").acquire().await }
    });
    within(Duration::from_secs(5), "the candidate queues", async {
        while kind_entries(
            &mut Admin::Server(admin.clone()),
            &kind_keys(&url, Family::Election, &name),
        )
        .await
        .len()
            < 2
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    // Every pub/sub connection of the server is dropped: the observer and the waiting candidate
    // subscribe again.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .expect("CLIENT KILL");
    assert!(
        killed >= 2,
        "{killed} pub/sub connections killed, not the observer's and the candidate's"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    lead.resign().await.expect("resign");
    let b_lead = within(Duration::from_secs(10), "the candidate after the kill", next)
        .await
        .expect("task")
        .expect("campaign");
    sees(
        &mut observed,
        Some("b"),
        "the observer sees the new leader after the kill",
    )
    .await;
    let now = election.leader().await.expect("leader").expect("a leader");
    assert_eq!((now.value.as_str(), now.term), ("b", b_lead.term()));
    b_lead.resign().await.expect("resign");
    sees(&mut observed, None, "the observer sees nobody lead").await;
}

async fn evalsha_calls(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    common::command_counts(admin).await.get("evalsha").copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_renewal_batch_renews_every_kind() {
    let _q2 = Q2.lock().await;
    common::init_logs();
    let url = q2();
    let mut admin = common::admin(&url).await;
    let (a, b) = (common::locker(&url).await, common::locker(&url).await);
    let ttl = Duration::from_millis(900);
    let base = unique_name("mixed_batch");
    let (mut held, mut leads) = (Vec::new(), Vec::new());
    for i in 0..20 {
        let name = format!("{base}/{i}");
        held.push(a.lock(&name).ttl(ttl).acquire().await.expect("mutex"));
        held.push(a.semaphore(&name, 2).ttl(ttl).acquire().await.expect("permit"));
        held.push(a.rwlock(&name).read().ttl(ttl).acquire().await.expect("read"));
        held.push(
            a.rwlock(format!("{name}/w"))
                .write()
                .ttl(ttl)
                .acquire()
                .await
                .expect("write"),
        );
        leads.push(a.election(&name).campaign("a").ttl(ttl).acquire().await.expect("lead"));
    }
    tokio::time::sleep(ttl).await;
    let before = evalsha_calls(&mut admin).await;
    let window = ttl * 4;
    tokio::time::sleep(window).await;
    let calls = evalsha_calls(&mut admin).await - before;
    let rounds = (window.as_secs_f64() / (ttl.as_secs_f64() / 3.0)).ceil() as u64;
    eprintln!("100 leases of every kind, {rounds} renewal intervals: {calls} EVALSHA (2 per interval expected)");
    assert!(held.iter().all(|g| g.is_held()), "a lease was lost although renewed");
    assert!(
        leads.iter().all(|g| g.is_leader()),
        "a leadership was lost although renewed"
    );
    assert!(
        calls <= 3 * rounds + 4,
        "{calls} script calls in {rounds} intervals: not one batch"
    );
    for i in 0..20 {
        let name = format!("{base}/{i}");
        assert!(b
            .semaphore(&name, 2)
            .try_acquire()
            .await
            .expect("try")
            .is_some_and(|g| g.is_held()));
        assert!(b.rwlock(&name).write().try_acquire().await.expect("try").is_none());
        assert!(b
            .election(&name)
            .campaign("b")
            .try_acquire()
            .await
            .expect("try")
            .is_none());
    }
    for g in held {
        g.release().await.expect("release");
    }
    for g in leads {
        g.resign().await.expect("resign");
    }
}

/// Every key of a semaphore, read-write lock and election but the fencing counter is gone once
/// nobody holds or waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_keys_outlive_their_locks() {
    common::init_logs();
    let url = common::redis_url();
    let mut admin = common::admin(&url).await;
    let (a, b) = (common::locker(&url).await, common::locker(&url).await);
    let name = unique_name("no_keys");
    let permit = a.semaphore(&name, 1).acquire().await.expect("acquire");
    let write = a.rwlock(&name).write().acquire().await.expect("acquire");
    let lead = a.election(&name).campaign("a").acquire().await.expect("acquire");
    let waiters = [
        tokio::spawn({
            let (b, name) = (b.clone(), name.clone());
            async move { b.semaphore(&name, 1).acquire().await.map(drop) }
        }),
        tokio::spawn({
            let (b, name) = (b.clone(), name.clone());
            async move { b.rwlock(&name).read().acquire().await.map(drop) }
        }),
        tokio::spawn({
            let (b, name) = (b.clone(), name.clone());
            async move { b.election(&name).campaign("b").acquire().await.map(drop) }
        }),
    ];
    tokio::time::sleep(Duration::from_millis(300)).await;
    permit.release().await.expect("release");
    write.release().await.expect("release");
    lead.resign().await.expect("resign");
    for w in waiters {
        within(Duration::from_secs(10), "the waiters", w)
            .await
            .expect("task")
            .expect("acquire");
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // the dropped guards' releases
    for family in [Family::Semaphore, Family::RwLock, Family::Election] {
        let k = kind_keys(&url, family, &name);
        for key in [&k.holders, &k.info, &k.queue, &k.alive, &k.writers] {
            let exists: i64 = redis::cmd("EXISTS")
                .arg(key)
                .query_async(&mut admin)
                .await
                .expect("EXISTS");
            assert_eq!(exists, 0, "{key} outlived its lock");
        }
        let fence: i64 = redis::cmd("EXISTS")
            .arg(&k.fence)
            .query_async(&mut admin)
            .await
            .expect("EXISTS");
        assert_eq!(fence, 1, "the fencing counter of the {} is gone", family.name());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_and_unconfirmed_grants_of_every_kind() {
    common::init_logs();
    let sentinel = common::sentinel_url();
    // One replica; two are asked for: nothing can be confirmed, and nothing is kept.
    let greedy = common::locker(&with_options(&sentinel, "min_replicas=2&replica_timeout=200ms")).await;
    let name = unique_name("unconfirmed_kinds");
    let results = [
        greedy.semaphore(&name, 2).try_acquire().await.map(drop),
        greedy.rwlock(&name).read().try_acquire().await.map(drop),
        greedy.election(&name).campaign("g").try_acquire().await.map(drop),
    ];
    for r in results {
        match r {
            Err(LockError::Unavailable { message, .. }) => assert!(message.contains("min_replicas=2"), "{message}"),
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
    let mut admin = common::admin_for(&sentinel).await;
    for family in [Family::Semaphore, Family::RwLock, Family::Election] {
        let left = kind_entries(&mut admin, &kind_keys(&sentinel, family, &name)).await;
        assert!(left.is_empty(), "an unconfirmed {} was kept: {left:?}", family.name());
    }
    // One replica asked for: grants and renewals are confirmed.
    let careful = common::locker(&with_options(&sentinel, "min_replicas=1")).await;
    let ttl = Duration::from_millis(900);
    let held = [
        careful.semaphore(&name, 2).ttl(ttl).acquire().await.expect("permit"),
        careful.rwlock(&name).write().ttl(ttl).acquire().await.expect("write"),
    ];
    let lead = careful
        .election(&name)
        .campaign("c")
        .ttl(ttl)
        .acquire()
        .await
        .expect("lead");
    tokio::time::sleep(ttl * 3).await;
    for g in held {
        assert!(g.is_held(), "lost: {:?}", g.lost_reason());
        g.release().await.expect("release");
    }
    assert!(lead.is_leader(), "lost: {:?}", lead.guard().lost_reason());
    lead.resign().await.expect("resign");
}

/// An observation ends when its backend is dropped (`changed()` then fails, as its docs say),
/// instead of keeping the backend, its connections and its task alive for as long as the watch
/// lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_ends_with_its_backend() {
    let url = common::redis_url();
    let name = unique_name("observe_end");
    let (watcher, leader) = (common::locker(&url).await, common::locker(&url).await);
    let lead = leader.election(&name).campaign("one").acquire().await.expect("lead");
    let mut observed = watcher.election(&name).observe().await.expect("observe");
    assert_eq!(observed.leader().map(|l| l.value), Some("one".into()));
    drop(watcher);
    within(Duration::from_secs(10), "the observer ending with its backend", async {
        while observed.changed().await.is_ok() {}
    })
    .await;
    lead.resign().await.expect("resign");
}
