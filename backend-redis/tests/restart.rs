//! Redis restarted without persistence while a lock is held (against the quorum server redis-q1
//! used as a single server, so the shared `redis` of the other tests is not disturbed).
//!
//! The restarted server has lost every key: the holder's lock, the queue, the fencing counter.
//! What must hold anyway: nobody is granted the lock before the old holder's `lost()` fired (the
//! server grants nothing new for `restart_delay` after it started), a waiter that was queued
//! rides out the restart and gets the lock, and fencing tokens keep growing. The same for a
//! semaphore permit and an election's leadership.

mod common;

use std::time::Duration;

use locksmith_core::conformance::servers::{backends, OnDrop};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::{LockError, LostReason};
use tokio::time::Instant;

/// The options of every locker here: a short restart delay, so the test takes seconds.
const OPTIONS: &str = "restart_delay=3s";

/// Held by the tests that restart redis-q1.
static RESTARTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_never_double_grants() {
    let _serial = RESTARTS.lock().await;
    common::init_logs();
    let url = common::with_options(&common::quorum_hosts().remove(0), OPTIONS); // redis-q1
    let (a, b, c) = (
        common::locker(&url).await,
        common::locker(&url).await,
        common::locker(&url).await,
    );
    let name = unique_name("restart");

    // Some history, so that the counter is well above 1.
    let ttl = Duration::from_secs(2);
    let mut last = 0;
    for _ in 0..3 {
        let g = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        g.release().await.expect("release");
    }
    let held = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    let token = held.fencing_token();
    let lost_at = tokio::spawn({
        let lost = held.lost();
        async move {
            let reason = lost.await;
            (Instant::now(), reason)
        }
    });
    // A waiter queued before the restart, with plenty of time left on its deadline.
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move {
            let result = b.lock(&name).ttl(ttl).timeout(Duration::from_secs(60)).acquire().await;
            (Instant::now(), result)
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let stopped_at = Instant::now();
    {
        let _restore = OnDrop::start("redis-q1");
        backends(&["stop", "redis-q1"]);
        backends(&["start", "redis-q1"]);
    }

    // Right after the restart the lock looks free, but its old holder may still be working:
    // nobody gets it yet.
    let early = c.lock(&name).ttl(ttl).try_acquire().await.expect("try after restart");
    assert!(
        early.is_none(),
        "a restarted server without the lock's data granted it at once (token {:?}, old holder's {token})",
        early.as_ref().map(|g| g.fencing_token())
    );

    let (granted_at, got) = within(Duration::from_secs(60), "the waiter after the restart", waiter)
        .await
        .expect("waiter task");
    let got = got.expect("a waiter with time left rides out the restart");
    let (lost_at, reason) = within(Duration::from_secs(30), "lost() after the restart", lost_at)
        .await
        .expect("lost task");
    assert!(
        matches!(reason, LostReason::LeaseGone(_) | LostReason::RenewalFailed(_)),
        "{reason:?}"
    );
    assert!(
        lost_at < granted_at,
        "the new holder got the lock {:?} before the old holder was told it lost it",
        lost_at - granted_at
    );
    assert!(
        got.fencing_token() > token,
        "fencing token went backwards after the restart: {} after {token}",
        got.fencing_token()
    );
    eprintln!(
        "old holder told {:?} and the waiter granted {:?} after the server was stopped",
        lost_at - stopped_at,
        granted_at - stopped_at
    );
    got.release().await.expect("release");
    assert!(held.release().await.is_err());
}

/// The same for a semaphore permit and an election's leadership: after the restart nobody gets
/// them before their holder was told it lost them, and tokens (terms) keep growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_never_double_grants_permits_or_leadership() {
    let _serial = RESTARTS.lock().await;
    common::init_logs();
    let url = common::with_options(&common::quorum_hosts().remove(0), OPTIONS); // redis-q1
    let (a, b, c) = (
        common::locker(&url).await,
        common::locker(&url).await,
        common::locker(&url).await,
    );
    let name = unique_name("restart_kinds");
    let ttl = Duration::from_secs(2);
    let permit = a.semaphore(&name, 1).ttl(ttl).acquire().await.expect("permit");
    let lead = a.election(&name).campaign("a").ttl(ttl).acquire().await.expect("lead");
    let (token, term) = (permit.fencing_token(), lead.term());
    let lost = [permit.lease().lost.clone(), lead.guard().lease().lost.clone()].map(|lost| {
        tokio::spawn(async move {
            lost.wait().await;
            Instant::now()
        })
    });
    let waiting_permit = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move {
            let got = b
                .semaphore(&name, 1)
                .ttl(ttl)
                .timeout(Duration::from_secs(60))
                .acquire()
                .await;
            (Instant::now(), got.expect("a permit after the restart").fencing_token())
        }
    });
    let waiting_lead = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move {
            let got = b
                .election(&name)
                .campaign("b")
                .ttl(ttl)
                .timeout(Duration::from_secs(60))
                .acquire()
                .await;
            (Instant::now(), got.expect("leadership after the restart").term())
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    {
        let _restore = OnDrop::start("redis-q1");
        backends(&["stop", "redis-q1"]);
        backends(&["start", "redis-q1"]);
    }
    assert!(c
        .semaphore(&name, 1)
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    assert!(c
        .election(&name)
        .campaign("c")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    let (permit_at, new_token) = within(Duration::from_secs(60), "the permit waiter", waiting_permit)
        .await
        .expect("task");
    let (lead_at, new_term) = within(Duration::from_secs(60), "the candidate", waiting_lead)
        .await
        .expect("task");
    let [permit_lost, lead_lost] = lost;
    let permit_lost = within(Duration::from_secs(30), "the permit's lost()", permit_lost)
        .await
        .expect("task");
    let lead_lost = within(Duration::from_secs(30), "the leadership's lost()", lead_lost)
        .await
        .expect("task");
    assert!(
        permit_lost < permit_at,
        "a second permit holder before the first was told"
    );
    assert!(lead_lost < lead_at, "a second leader before the first was told");
    assert!(
        new_token > token && new_term > term,
        "tokens went backwards: {token} → {new_token}, {term} → {new_term}"
    );
}

/// A lock whose TTL is longer than the restart delay could outlive the delay after a restart:
/// it is refused with a clear error instead.
#[tokio::test]
async fn ttl_longer_than_the_restart_delay_is_refused() {
    let url = common::with_options(&common::redis_url(), "restart_delay=5s");
    let locker = common::locker(&url).await;
    let name = unique_name("long_ttl");
    for result in [
        locker
            .lock(&name)
            .ttl(Duration::from_secs(6))
            .try_acquire()
            .await
            .map(drop),
        locker.lock(&name).ttl(Duration::from_secs(6)).acquire().await.map(drop),
    ] {
        match result {
            Err(LockError::InvalidOption(m)) => assert!(m.contains("restart_delay"), "{m}"),
            other => panic!("expected InvalidOption, got {other:?}"),
        }
    }
    let ok = locker
        .lock(&name)
        .ttl(Duration::from_secs(5))
        .try_acquire()
        .await
        .expect("try");
    ok.expect("free").release().await.expect("release");
}

/// Fencing counters do not pile up: each expires some time after its lock was last taken (the
/// default time floor keeps tokens growing without them).
#[tokio::test]
async fn fencing_counters_expire() {
    let url = common::redis_url();
    let locker = common::locker(&url).await;
    let harness = common::RedisHarness::new("").await;
    let mut admin = common::admin(&url).await;
    let mut last = 0;
    for i in 0..20 {
        let name = format!("{}/{i}", unique_name("counters"));
        let g = locker.lock(&name).acquire().await.expect("acquire");
        assert!(g.fencing_token() > last, "tokens across names come from the clock");
        last = g.fencing_token();
        g.release().await.expect("release");
        let keys = harness.keys(&locksmith_core::driver::LockName::new(&name).unwrap());
        let pttl = pttl(&mut admin, &keys.fence).await;
        assert!(pttl > 0, "the fencing counter of {name} never expires (PTTL {pttl})");
    }
}

/// With the time floor a grant keeps the counter's expiry (it does not push it back), and a
/// counter that expired (or was lost) starts again at the clock: every token of a lock stays above
/// every earlier one.
#[tokio::test]
async fn fencing_counter_keeps_its_expiry_and_restarts_above_earlier_tokens() {
    let url = common::redis_url();
    let locker = common::locker(&url).await;
    let harness = common::RedisHarness::new("").await;
    let mut admin = common::admin(&url).await;
    let name = unique_name("counter-expiry");
    let keys = harness.keys(&locksmith_core::driver::LockName::new(&name).unwrap());
    let mut last = 0;
    for round in 0..3 {
        let mut ttls = Vec::new();
        for _ in 0..5 {
            let g = locker.lock(&name).acquire().await.expect("acquire");
            assert!(
                g.fencing_token() > last,
                "round {round}: token {} after {last}",
                g.fencing_token()
            );
            last = g.fencing_token();
            g.release().await.expect("release");
            let pttl = pttl(&mut admin, &keys.fence).await;
            assert!(pttl > 0, "the counter has no expiry (PTTL {pttl})");
            ttls.push(pttl);
        }
        assert!(
            ttls.windows(2).all(|w| w[1] <= w[0]),
            "a grant pushed the counter's expiry back: {ttls:?}"
        );
        // As if it expired: the next grant starts it again, above the tokens given so far.
        let _: i64 = redis::cmd("DEL")
            .arg(&keys.fence)
            .query_async(&mut admin)
            .await
            .expect("DEL");
    }
}

/// `PTTL key` on the admin connection.
async fn pttl(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(admin).await.expect("PTTL")
}
