//! Redis Sentinel with locks held and waiters waiting: a `SENTINEL FAILOVER`, a killed master, and
//! replica confirmation (`min_replicas`), against the test servers' master, replica and three
//! sentinels (`LOCKSMITH_TEST_REDIS_SENTINEL`).
//!
//! What must hold through a failover: the holder keeps its lock (its watchdog renews it on the
//! new master) or is told it lost it before anyone else gets it; a waiter queued before the
//! failover gets the lock once it is released; fencing tokens keep growing. The same for a
//! semaphore permit and an election's leadership, whose observer keeps seeing changes.

mod common;

use std::time::Duration;

use common::{backends, holds_through, sentinel_url, wait_for_change, with_options, FAULTS};
use locksmith_core::conformance::servers::OnDrop;
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::{LockError, LostReason};

/// The data server that is not the master now.
fn other(master: &str) -> &'static str {
    if master == "sentinel-m" {
        "sentinel-r"
    } else {
        "sentinel-m"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_keeps_held_locks_and_wakes_waiters() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    // Until the old master is turned into a replica (and drops its clients), renewals reach it
    // and are lost with it: the lease must outlast that window (1-3 s here), as it does with the
    // default TTL.
    holds_through(&sentinel_url(), Duration::from_secs(6), |_| async {
        let old = backends(&["leader", "redis-sentinel"]).await;
        let new = backends(&["failover", "redis-sentinel"]).await;
        assert_ne!(old, new, "the failover did not move the master");
    })
    .await;
    // New locks work on the new master. `acquire`, not `try_acquire`: when an earlier test
    // restarted the server that is master now, a new name stays free for `restart_delay` (15 s)
    // after its start (see "After data loss" in the crate docs), and one attempt answers "not now".
    let c = common::locker(&sentinel_url()).await;
    let guard = c
        .lock(unique_name("sentinel-after"))
        .timeout(Duration::from_secs(40))
        .acquire()
        .await
        .expect("a new lock on the new master");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_keeps_permits_and_leaders_and_observers() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let url = sentinel_url();
    let ttl = Duration::from_secs(6); // as in the mutex's failover test
    let (a, b, watcher) = (
        common::locker(&url).await,
        common::locker(&url).await,
        common::locker(&url).await,
    );
    let name = unique_name("failover_kinds");
    let permit = a.semaphore(&name, 1).ttl(ttl).acquire().await.expect("permit");
    let lead = a.election(&name).campaign("a").ttl(ttl).acquire().await.expect("lead");
    let (token, term) = (permit.fencing_token(), lead.term());
    let waiting_permit = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move {
            b.semaphore(&name, 1)
                .ttl(ttl)
                .timeout(Duration::from_secs(120))
                .acquire()
                .await
        }
    });
    let waiting_lead = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move {
            b.election(&name)
                .campaign("b")
                .ttl(ttl)
                .timeout(Duration::from_secs(120))
                .acquire()
                .await
        }
    });
    let mut observed = watcher.election(&name).observe().await.expect("observe");
    assert_eq!(observed.leader().map(|l| l.term), Some(term));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let old = backends(&["leader", "redis-sentinel"]).await;
    let new = backends(&["failover", "redis-sentinel"]).await;
    assert_ne!(old, new, "the failover did not move the master");

    // A TTL after the failover: the holders renewed on the new master, nobody else got in.
    tokio::time::sleep(ttl).await;
    assert!(permit.is_held(), "the permit was lost: {:?}", permit.lost_reason());
    assert!(
        lead.is_leader(),
        "the leadership was lost: {:?}",
        lead.guard().lost_reason()
    );
    assert!(
        !waiting_permit.is_finished() && !waiting_lead.is_finished(),
        "a waiter got in"
    );
    assert_eq!(observed.leader().map(|l| l.value), Some("a".into()));
    let leader = watcher
        .election(&name)
        .leader()
        .await
        .expect("leader")
        .expect("a leader");
    assert_eq!((leader.value.as_str(), leader.term), ("a", term));

    // The waiters queued before the failover get in once released; the observer, subscribed
    // again on the new master, is told at once.
    permit.release().await.expect("release");
    lead.resign().await.expect("resign");
    let got = within(Duration::from_secs(30), "the permit waiter", waiting_permit)
        .await
        .expect("task")
        .expect("acquire");
    assert!(got.fencing_token() > token);
    let next = within(Duration::from_secs(30), "the next leader", waiting_lead)
        .await
        .expect("task")
        .expect("campaign");
    assert!(next.term() > term);
    within(Duration::from_secs(2), "the observer sees the next leader", async {
        while observed.leader().map(|l| l.value).as_deref() != Some("b") {
            observed.changed().await.expect("observation");
        }
    })
    .await;
    got.release().await.expect("release");
    next.resign().await.expect("resign");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_master_keeps_a_confirmed_lock() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    // Leases must outlast the failover (down after 1 s, then an election) plus the old master's
    // return as a replica: until a replica is back, renewals cannot be confirmed. 30 s, not 14: in
    // a full scripts/test (twice in five runs) the sentinels failed over a second time, unasked,
    // onto the old master 4 s after it came back as a replica, and renewals went unconfirmed until
    // the first new master was a replica again, longer than 14 s (the holder was told: safe, but
    // not what this test is about); restart_delay must be at least the TTL. Confirmation is the
    // default on Sentinel (min_replicas=1): the URL does not set it.
    let url = with_options(&sentinel_url(), "restart_delay=30s");
    holds_through(&url, Duration::from_secs(30), |_| async {
        let old = backends(&["leader", "redis-sentinel"]).await;
        let _restart = OnDrop::start(&old);
        backends(&["kill", &old]).await;
        let new = wait_for_change(&["leader", "redis-sentinel"], &old, Duration::from_secs(30)).await;
        assert_eq!(new, other(&old));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_grants_are_given_back() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    // One replica; two are asked for: no grant can be confirmed. `restart_delay=0`: a master that
    // an earlier test restarted would otherwise keep new names free for 15 s, and a single
    // attempt would answer "not now" before asking any replica.
    let greedy = common::locker(&with_options(
        &sentinel_url(),
        "min_replicas=2&replica_timeout=200ms&restart_delay=0",
    ))
    .await;
    let plain = common::locker(&with_options(&sentinel_url(), "min_replicas=0&restart_delay=0")).await;
    let name = unique_name("unconfirmed");
    match greedy.lock(&name).try_acquire().await {
        Err(LockError::Unavailable { message, .. }) => {
            assert!(message.contains("min_replicas=2"), "{message}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let result = greedy.lock(&name).timeout(Duration::from_secs(1)).acquire().await;
    assert!(
        matches!(result, Err(LockError::Unavailable { .. } | LockError::Timeout(_))),
        "{result:?}"
    );
    // Nothing was kept: the lock is free and nobody is queued.
    let info = plain.inspect(&name).await.expect("inspect");
    assert!(info.holder.is_none() && info.waiters == 0, "{info:?}");
    assert!(plain.lock(&name).try_acquire().await.expect("try").is_some());

    // A server without replicas cannot confirm anything either.
    let lonely = common::locker(&with_options(
        &common::redis_url(),
        "min_replicas=1&replica_timeout=100ms&restart_delay=0",
    ))
    .await;
    let result = lonely.lock(unique_name("lonely")).try_acquire().await;
    assert!(matches!(result, Err(LockError::Unavailable { .. })), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_renewals_fire_lost() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    // The default's confirmation (min_replicas=1), with a shorter wait for the replica.
    let url = with_options(&sentinel_url(), "replica_timeout=200ms");
    let a = common::locker(&url).await;
    let held = a
        .lock(unique_name("unconfirmed-renewal"))
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .expect("acquire");
    let master = backends(&["leader", "redis-sentinel"]).await;
    let replica = other(&master);
    let _restart = OnDrop::start(replica);
    backends(&["stop", replica]).await;
    let reason = within(
        Duration::from_secs(15),
        "lost() with no replica to confirm renewals",
        held.lost(),
    )
    .await;
    assert!(matches!(reason, LostReason::RenewalFailed(_)), "{reason:?}");
}

/// A failover after a replication lag, with the default confirmation: the replica is paused (its
/// link cut: renewals reach only the master), the master is killed, the replica resumes and is
/// promoted without the renewals the master took alone. Confirmed (the default), those renewals
/// do not count: the holder is told it lost the lock before a contender polling every 20 ms gets
/// it (or keeps it until it releases), the contender gets it once the old master is back as the
/// new master's replica, and its token is larger. (Unconfirmed, independent testing saw 3 of 3
/// such runs double-grant; over this machine's loopback the same test with `min_replicas=0` was
/// not caught double-granting in 5 runs, so it checks the default's promise, and
/// `config::tests::replica_confirmation_is_on_by_default_where_failover_is_the_point` the default.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_failover_tells_the_holder_before_anyone_else_gets_the_lock() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let url = with_options(&sentinel_url(), "replica_timeout=200ms");
    let (a, b) = (common::locker(&url).await, common::locker(&url).await);
    let name = unique_name("lagging-failover");
    let ttl = Duration::from_secs(4);
    let held = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    let token = held.fencing_token();
    let mut told = tokio::spawn({
        let lost = held.lost();
        async move {
            let reason = lost.await;
            (tokio::time::Instant::now(), reason)
        }
    });
    let master = backends(&["leader", "redis-sentinel"]).await;
    let replica = other(&master);
    let _resume = OnDrop::resume(replica);
    let _restart = OnDrop::start(&master);
    // The lag: renewals that reach the master only, long enough that the replica's copy of the
    // lease runs out before the promotion (about 2 s: down after 1 s, then the election).
    backends(&["pause", replica]).await;
    tokio::time::sleep(ttl * 5 / 8).await;
    backends(&["kill", &master]).await;
    backends(&["resume", replica]).await;
    // A contender that tries every 20 ms from now on (the holder renews every 400 ms): it takes
    // the lock the moment a server grants it.
    let contender = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move {
            loop {
                if let Ok(Some(got)) = b.lock(&name).ttl(ttl).try_acquire().await {
                    return (tokio::time::Instant::now(), got);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let new = wait_for_change(&["leader", "redis-sentinel"], &master, Duration::from_secs(30)).await;
    assert_eq!(new, replica);
    // The promoted replica has no replica of its own until the old master returns as one: until
    // then nothing can be confirmed, so nothing is granted.
    backends(&["start", &master]).await;
    // The holder's end: told it lost the lock, or (had it kept it) its release.
    let holder_end = match tokio::time::timeout(ttl * 3, &mut told).await {
        Ok(told) => {
            let (at, reason) = told.expect("lost() task");
            assert!(
                matches!(reason, LostReason::RenewalFailed(_) | LostReason::LeaseGone(_)),
                "{reason:?}"
            );
            at
        }
        Err(_) => {
            let at = tokio::time::Instant::now();
            held.release().await.expect("release");
            at
        }
    };
    let (granted_at, got) = within(Duration::from_secs(60), "the contender after the failover", contender)
        .await
        .expect("contender task");
    assert!(
        holder_end <= granted_at,
        "the contender got the lock {:?} before its holder was told",
        holder_end - granted_at
    );
    assert!(
        got.fencing_token() > token,
        "fencing went from {token} to {}",
        got.fencing_token()
    );
    got.release().await.expect("release");
}

/// Bug: after a request failed as a failover makes them fail (here: the master closed the
/// client's connections), every caller asked the sentinels again in turn, one after the other
/// behind a lock, before its request: with sentinels that do not answer (paused, cut off) each
/// question took its timeouts, and requests to a master that answered, renewals among them,
/// waited out theirs. Now one question runs in the background and requests go to the master the
/// client knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_that_do_not_answer_hold_up_no_request_to_the_master() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let url = sentinel_url();
    let locker = common::locker(&url).await;
    let ttl = Duration::from_secs(3);
    let held = locker
        .lock(unique_name("sentinels-silent"))
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    let master = backends(&["leader", "redis-sentinel"]).await;
    let master_addr = backends(&["address", &master]).await;
    let sentinels = ["sentinel-s1", "sentinel-s2", "sentinel-s3"];
    let _resume: Vec<OnDrop> = sentinels.iter().map(|s| OnDrop::resume(s)).collect();
    for s in sentinels {
        backends(&["pause", s]).await;
    }
    let mut admin = common::admin(&format!("redis://{master_addr}")).await;
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query_async(&mut admin)
        .await
        .expect("CLIENT KILL TYPE normal");
    let paused_at = tokio::time::Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for i in 0..20 {
        let locker = locker.clone();
        callers.spawn(async move {
            tokio::time::sleep(Duration::from_millis(150 * i)).await;
            let start = tokio::time::Instant::now();
            let got = locker
                .lock(unique_name("sentinels-silent-each"))
                .ttl(ttl)
                .try_acquire()
                .await;
            let took = start.elapsed();
            (got.map(|g| g.is_some()), took)
        });
    }
    while let Some(done) = callers.join_next().await {
        let (got, took) = done.expect("caller");
        // The first request after the close may meet the dead connection and be sent again.
        assert!(
            matches!(got, Ok(true)),
            "a try_acquire on a master that answers, with the sentinels silent: {got:?} after {took:?}"
        );
        assert!(took < Duration::from_secs(2), "a try_acquire took {took:?}");
    }
    tokio::time::sleep_until(paused_at + ttl * 2).await;
    assert!(
        held.is_held(),
        "a lock on a master that answers was lost while the sentinels did not: {:?}",
        held.lost_reason()
    );
    held.release().await.expect("release");
}

/// A master cut off (paused here: it answers nothing, as behind a partition) is replaced by its
/// replica; a waiter that queued on it before must follow the promotion within a response
/// timeout, not wait on the silent old master until its own retries happen to ask the sentinels
/// again (independent testing saw it take about 18 s after the promotion). `min_replicas=0`: the
/// promoted replica has no replica of its own until the old master is back, and would confirm
/// nothing; what is measured is the following alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_the_promotion_of_a_cut_off_masters_replica_within_a_response_timeout() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let response_timeout = Duration::from_secs(3);
    let url = with_options(&sentinel_url(), "min_replicas=0&response_timeout=3s");
    let cut = CutOff::make(&url, "cut-off-master", Duration::from_secs(60)).await;
    let (held, waiter, master, promoted_at) = (cut.held, cut.waiter, cut.master, cut.promoted_at);
    let _resume = OnDrop::resume(&master);
    // The holder's lease (1 s) ran out on the replica before the promotion (down after 1 s,
    // then the election): the waiter gets the lock as soon as its step reaches the new master.
    let (granted_at, got) = within(Duration::from_secs(60), "the waiter after the promotion", waiter)
        .await
        .expect("waiter task");
    let got = got.expect("the waiter gets the lock on the new master");
    let after = granted_at.saturating_duration_since(promoted_at);
    eprintln!("granted {after:?} after the promotion");
    assert!(
        after <= response_timeout + Duration::from_millis(500),
        "the waiter got the lock {after:?} after the promotion (response timeout {response_timeout:?})"
    );
    backends(&["resume", &master]).await;
    drop(held);
    got.release().await.expect("release");
}

/// The same cut with replica confirmation on (the default): the promoted replica has no replica
/// of its own while the old master is cut off, so it can confirm no grant, and the waiter is
/// granted only once a replica is online again (here: the old master, back and turned into the
/// new master's replica by the sentinels, about 10 s after it returned). That wait is the price
/// of confirmation, documented in the crate docs ("Replica confirmation"); what is checked here is
/// that the waiter then follows within a response timeout of the replica coming online.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_confirmation_a_waiter_is_granted_once_the_promoted_master_has_a_replica() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let response_timeout = Duration::from_secs(3);
    let url = with_options(&sentinel_url(), "response_timeout=3s");
    let cut = CutOff::make(&url, "cut-off-master-confirmed", Duration::from_secs(90)).await;
    let (held, waiter, master, promoted_at, new) = (cut.held, cut.waiter, cut.master, cut.promoted_at, cut.new);
    let _resume = OnDrop::resume(&master);
    let token = held.fencing_token();
    backends(&["resume", &master]).await;
    let mut new_master = common::admin(&format!("redis://{}:{}", new[0], new[1])).await;
    let online_at = loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut new_master)
            .await
            .expect("INFO replication");
        if info.contains("state=online") {
            break tokio::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (granted_at, got) = within(Duration::from_secs(90), "the waiter after the promotion", waiter)
        .await
        .expect("waiter task");
    let got = got.expect("the waiter gets the lock once a replica confirms");
    eprintln!(
        "replica online {:?} after the promotion, granted {:?} after that",
        online_at - promoted_at,
        granted_at.saturating_duration_since(online_at)
    );
    assert!(
        granted_at.saturating_duration_since(online_at) <= response_timeout + Duration::from_millis(500),
        "the waiter got the lock {:?} after the new master's replica came online",
        granted_at.saturating_duration_since(online_at)
    );
    assert!(got.fencing_token() > token, "a token went backwards");
    drop(held);
    got.release().await.expect("release");
}

/// A lock held with a 1 s lease on the master, a waiter queued behind it, then the master paused
/// (answering nothing, as if cut off) until the sentinels promote its replica.
struct CutOff {
    held: locksmith_core::LockGuard,
    /// When the waiter got its answer, and the answer.
    waiter: tokio::task::JoinHandle<(tokio::time::Instant, locksmith_core::Result<locksmith_core::LockGuard>)>,
    /// The paused master's id (`scripts/backends`): resume it.
    master: String,
    /// When the sentinels named the new master, and its `[host, port]`.
    promoted_at: tokio::time::Instant,
    new: Vec<String>,
}

impl CutOff {
    /// On the sentinel topology of `url`, with a lock named after `label`; the waiter waits at
    /// most `limit`.
    async fn make(url: &str, label: &str, limit: Duration) -> CutOff {
        let (a, b) = (common::locker(url).await, common::locker(url).await);
        let name = unique_name(label);
        let ttl = Duration::from_secs(1);
        let held = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
        let waiter = tokio::spawn(async move {
            let got = b.lock(&name).ttl(ttl).timeout(limit).acquire().await;
            (tokio::time::Instant::now(), got)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let master = backends(&["leader", "redis-sentinel"]).await;
        let mut sentinel = SentinelAdmin::connect().await;
        let before = sentinel.master().await.expect("the sentinels name a master");
        backends(&["pause", &master]).await;
        let (promoted_at, new) = sentinel.promotion(&before).await;
        CutOff {
            held,
            waiter,
            master,
            promoted_at,
            new,
        }
    }
}

/// A connection to the first sentinel, for the tests that watch a promotion as the sentinels
/// tell it.
struct SentinelAdmin(redis::aio::MultiplexedConnection);

impl SentinelAdmin {
    async fn connect() -> SentinelAdmin {
        let parsed = locksmith_core::driver::BackendUrl::parse(&sentinel_url()).unwrap();
        SentinelAdmin(common::admin(&format!("redis://{}", parsed.hosts[0].to_addr(26379))).await)
    }

    /// The master's `[host, port]` as the sentinel names it.
    async fn master(&mut self) -> Option<Vec<String>> {
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("locksmith")
            .query_async(&mut self.0)
            .await
            .ok()
    }

    /// Polls every 20 ms until the sentinel names a master other than `before`: when, and which.
    async fn promotion(&mut self, before: &[String]) -> (tokio::time::Instant, Vec<String>) {
        loop {
            if let Some(now) = self.master().await.filter(|now| now != before) {
                return (tokio::time::Instant::now(), now);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
