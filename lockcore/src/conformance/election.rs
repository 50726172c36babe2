//! The election suite ([`crate::Locker::election`]): one leader at a time, in campaign order, with
//! growing terms; `leader()` and `observe()` show who leads, pushed by the server; a crashed
//! leader passes leadership on after its TTL; and the families of one name never mix.
//!
//! [`election_observer_rides_out_outages`] is not in [`primitive_tests!`](crate::primitive_tests):
//! it needs a locker whose traffic goes through a [`Proxy`], and each backend's tests call it with
//! their server's address and a way to connect to the proxy (as [`super::deadlines`]).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::harness::{patience, unique_name, wait_for_residue_in, within, Builder, Harness};
use super::lifecycle::cut_backend_release;
use super::proxy::{Mode, Proxy};
use crate::name::LockName;
use crate::{Family, LeaderWatch, LockError, Locker, LostReason};

fn lock_name(name: &str) -> LockName {
    LockName::new(name).expect("name")
}

/// Waits (within `limit`) until the observed leader's value is `expected` (`None`: nobody);
/// changes in between (coalesced or not) are skipped. Returns the term seen.
async fn observe_until(watch: &mut LeaderWatch, expected: Option<&str>, limit: Duration) -> Option<u64> {
    let what = format!("observing the leader become {expected:?}");
    within(limit, &what, async {
        let mut now = watch.leader();
        loop {
            if now.as_ref().map(|l| l.value.as_str()) == expected {
                return now.map(|l| l.term);
            }
            now = watch.changed().await.expect("the observation ended");
        }
    })
    .await
}

/// Three candidates campaign one after another: the first leads, the others follow in order as
/// each resigns, with growing terms; `leader()` and an observer that started before anybody
/// campaigned agree at every step, and see nobody at the end.
pub async fn election_one_leader_at_a_time_in_order(h: &impl Harness) {
    let name = unique_name("elect_order");
    let key = lock_name(&name);
    let limit = patience(h);
    let watcher = h.locker().await;
    let election = watcher.election(&name);
    assert_eq!(election.leader().await.expect("leader"), None);
    let mut observed = election.observe().await.expect("observe");
    assert_eq!(observed.leader(), None);

    let (a, b, c) = (h.locker().await, h.locker().await, h.locker().await);
    let lead_a = a.election(&name).campaign("node-a").acquire().await.expect("campaign");
    let now = election.leader().await.expect("leader").expect("a leader");
    assert_eq!((now.value.as_str(), now.term), ("node-a", lead_a.term()));
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut followers = Vec::new();
    for (i, (locker, value)) in [(b, "node-b"), (c, "node-c")].into_iter().enumerate() {
        let (name, tx) = (name.clone(), tx.clone());
        followers.push(tokio::spawn(async move {
            let lead = locker
                .election(&name)
                .campaign(value)
                .acquire()
                .await
                .expect("campaign");
            let _ = tx.send((value, lead.term()));
            lead
        }));
        wait_for_residue_in(h, Family::Election, &key, 2 + i).await;
    }
    assert_eq!(
        observe_until(&mut observed, Some("node-a"), limit).await,
        Some(lead_a.term())
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(100), order.recv())
            .await
            .is_err(),
        "two leaders at once"
    );

    let term_a = lead_a.term();
    lead_a.resign().await.expect("resign");
    let (value, term_b) = within(limit, "the next leader", order.recv()).await.expect("a leader");
    assert_eq!(value, "node-b", "leadership skipped the next candidate in line");
    assert!(term_b > term_a, "term went from {term_a} to {term_b}");
    let now = election.leader().await.expect("leader").expect("a leader");
    assert_eq!((now.value.as_str(), now.term), ("node-b", term_b));
    assert_eq!(observe_until(&mut observed, Some("node-b"), limit).await, Some(term_b));

    followers
        .remove(0)
        .await
        .expect("follower")
        .resign()
        .await
        .expect("resign");
    let (value, term_c) = within(limit, "the last leader", order.recv()).await.expect("a leader");
    assert_eq!(value, "node-c");
    assert!(term_c > term_b);
    assert_eq!(observe_until(&mut observed, Some("node-c"), limit).await, Some(term_c));
    followers
        .remove(0)
        .await
        .expect("follower")
        .resign()
        .await
        .expect("resign");
    observe_until(&mut observed, None, limit).await;
    assert_eq!(election.leader().await.expect("leader"), None);
    wait_for_residue_in(h, Family::Election, &key, 0).await;
}

/// A leader resigns while the next candidate waits in line, five times in a row: an observer
/// sees each next leader directly, never "nobody leads" in between (a handover is one change of
/// leader on every backend, see [`crate::Election::observe`]).
pub async fn election_handover_shows_no_gap(h: &impl Harness) {
    const HANDOVERS: usize = 5;
    let name = unique_name("elect_handover");
    let key = lock_name(&name);
    let limit = patience(h);
    let watcher = h.locker().await;
    let mut observed = watcher.election(&name).observe().await.expect("observe");
    let first = h.locker().await;
    let mut leader = first
        .election(&name)
        .campaign("leader-0")
        .acquire()
        .await
        .expect("campaign");
    observe_until(&mut observed, Some("leader-0"), limit).await;
    // Every value the observer reports from here on, as soon as it reports it.
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let recorder = tokio::spawn(async move {
        while let Ok(now) = observed.changed().await {
            if seen_tx.send(now.map(|l| (l.value, l.term))).is_err() {
                return;
            }
        }
    });
    for i in 1..=HANDOVERS {
        let (locker, name) = (h.locker().await, name.clone());
        let next = tokio::spawn(async move {
            locker
                .election(&name)
                .campaign(format!("leader-{i}"))
                .acquire()
                .await
                .expect("campaign")
        });
        wait_for_residue_in(h, Family::Election, &key, 2).await;
        let before = leader.term();
        leader.resign().await.expect("resign");
        leader = within(limit, "the next leader", next).await.expect("campaign task");
        let expected = (format!("leader-{i}"), leader.term());
        let mut values = Vec::new();
        within(limit, "observing the next leader", async {
            while values.last() != Some(&Some(expected.clone())) {
                values.push(seen.recv().await.expect("the observation ended"));
            }
        })
        .await;
        assert!(
            values.iter().all(Option::is_some) || !h.seamless_handover(),
            "handover {i}: between leader-{} (term {before}) and {expected:?} the observer reported {values:?}",
            i - 1
        );
    }
    leader.resign().await.expect("resign");
    within(limit, "observing nobody lead", async {
        while seen.recv().await.expect("the observation ended").is_some() {}
    })
    .await;
    recorder.abort();
    wait_for_residue_in(h, Family::Election, &key, 0).await;
}

/// A leader that stops renewing (crashed) loses leadership after its TTL: the next candidate
/// leads, with a greater term, and an observer sees the change without asking.
pub async fn election_crashed_leader_passes_on(h: &impl Harness) {
    let name = unique_name("elect_crash");
    let ttl = h.short_ttl();
    let (a, b, watcher) = (h.locker().await, h.locker().await, h.locker().await);
    let lead = a
        .election(&name)
        .campaign("crashed")
        .ttl(ttl)
        .acquire()
        .await
        .expect("campaign");
    let term = lead.term();
    let mut observed = watcher.election(&name).observe().await.expect("observe");
    observe_until(&mut observed, Some("crashed"), patience(h)).await;
    let _lease = lead.abandon(); // stops renewing without resigning, as a crashed process would
    let next = within(
        patience(h),
        "the next leader after a crash",
        b.election(&name).campaign("next").ttl(ttl).acquire(),
    )
    .await
    .expect("campaign");
    assert!(next.term() > term);
    let seen = observe_until(&mut observed, Some("next"), patience(h)).await;
    assert_eq!(seen, Some(next.term()));
    next.resign().await.expect("resign");
}

/// `try_acquire` of a campaign leads only when nobody does; cancelled campaigns leave nothing.
pub async fn election_try_and_cancel(h: &impl Harness) {
    let name = unique_name("elect_try");
    let key = lock_name(&name);
    let (a, b) = (h.locker().await, h.locker().await);
    let lead = a
        .election(&name)
        .campaign("a")
        .try_acquire()
        .await
        .expect("try")
        .expect("nobody leads");
    assert!(b
        .election(&name)
        .campaign("b")
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    for i in 0..4u64 {
        let campaign = b
            .election(&name)
            .campaign("b")
            .timeout(Duration::from_millis(30 * i + 1))
            .acquire();
        let _ = tokio::time::timeout(Duration::from_millis(15 * i + 1), campaign).await;
    }
    wait_for_residue_in(h, Family::Election, &key, 1).await;
    lead.resign().await.expect("resign");
    wait_for_residue_in(h, Family::Election, &key, 0).await;
    assert_eq!(b.election(&name).leader().await.expect("leader"), None);
}

/// Campaign values at their bounds: an empty one, and one of [`crate::MAX_VALUE_LEN`] bytes of
/// multi-byte characters, lead and read back unchanged; a longer one and one with a NUL character
/// are refused at once with [`LockError::InvalidOption`] on every backend (not taken for an
/// outage and retried).
pub async fn election_values_at_their_bounds(h: &impl Harness) {
    let name = unique_name("elect_values");
    let locker = h.locker().await;
    let election = locker.election(&name);
    let widest = "é".repeat(crate::MAX_VALUE_LEN / 2);
    for value in [String::new(), widest] {
        let lead = election
            .campaign(value.as_str())
            .try_acquire()
            .await
            .expect("campaign")
            .expect("nobody leads");
        let now = election.leader().await.expect("leader").expect("a leader");
        assert!(
            now.value == value,
            "the leader's value came back changed ({} bytes)",
            now.value.len()
        );
        lead.resign().await.expect("resign");
    }
    for (value, what) in [
        ("é".repeat(crate::MAX_VALUE_LEN / 2) + "x", "one byte too long"),
        ("a\0b".to_string(), "with a NUL character"),
    ] {
        let tried = election.campaign(value.as_str()).try_acquire().await;
        assert!(
            matches!(tried, Err(LockError::InvalidOption(_))),
            "a campaign value {what}: expected InvalidOption, got {:?}",
            tried.map(|lead| lead.is_some())
        );
        let waited = within(
            patience(h),
            "a campaign with a refused value",
            election.campaign(value.as_str()).acquire(),
        )
        .await;
        assert!(
            matches!(waited, Err(LockError::InvalidOption(_))),
            "a campaign value {what}: expected InvalidOption, got {:?}",
            waited.map(|_| ())
        );
    }
    assert_eq!(election.leader().await.expect("leader"), None);
}

/// A mutex, a semaphore, a read-write lock and an election of one name are four independent
/// locks: all four are held at once, each excludes only its own kind.
pub async fn families_are_independent(h: &impl Harness) {
    let name = unique_name("families");
    let (a, b) = (h.locker().await, h.locker().await);
    let mutex = a.lock(&name).try_acquire().await.expect("try").expect("the mutex");
    let permit = a
        .semaphore(&name, 1)
        .try_acquire()
        .await
        .expect("try")
        .expect("the semaphore");
    let write = a
        .rwlock(&name)
        .write()
        .try_acquire()
        .await
        .expect("try")
        .expect("the rwlock");
    let lead = a
        .election(&name)
        .campaign("a")
        .try_acquire()
        .await
        .expect("try")
        .expect("the election");
    assert!(b.lock(&name).try_acquire().await.expect("try").is_none());
    assert!(b.semaphore(&name, 1).try_acquire().await.expect("try").is_none());
    assert!(b.rwlock(&name).read().try_acquire().await.expect("try").is_none());
    assert!(b
        .election(&name)
        .campaign("b")
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    assert_eq!(
        b.election(&name).leader().await.expect("leader").map(|l| l.value),
        Some("a".into())
    );
    for family in Family::ALL {
        wait_for_residue_in(h, family, &lock_name(&name), 1).await;
    }
    mutex.release().await.expect("release");
    permit.release().await.expect("release");
    write.release().await.expect("release");
    lead.resign().await.expect("resign");
    for family in Family::ALL {
        wait_for_residue_in(h, family, &lock_name(&name), 0).await;
    }
}

/// `list` shows the locks in use under a prefix, each family apart, and forgets them once free.
pub async fn list_shows_locks_in_use(h: &impl Harness) {
    let prefix = unique_name("list");
    let (a, b) = (h.locker().await, h.locker().await);
    let mutex = a.lock(format!("{prefix}/m")).acquire().await.expect("mutex");
    let p1 = a.semaphore(format!("{prefix}/s"), 2).acquire().await.expect("permit");
    let p2 = b.semaphore(format!("{prefix}/s"), 2).acquire().await.expect("permit");
    let lead = a
        .election(format!("{prefix}/e"))
        .campaign("x")
        .acquire()
        .await
        .expect("campaign");
    let listed = a.list(&prefix).await.expect("list");
    let seen: Vec<(String, Family, usize)> = listed.into_iter().map(|l| (l.name, l.family, l.entries)).collect();
    assert_eq!(
        seen,
        vec![
            (format!("{prefix}/e"), Family::Election, 1),
            (format!("{prefix}/m"), Family::Mutex, 1),
            (format!("{prefix}/s"), Family::Semaphore, 2),
        ]
    );
    mutex.release().await.expect("release");
    p1.release().await.expect("release");
    p2.release().await.expect("release");
    lead.resign().await.expect("resign");
    within(patience(h), "the listed locks going away", async {
        while !a.list(&prefix).await.expect("list").is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// An observer whose connection is cut while the leadership is handed over (the next candidate
/// already in line) keeps reporting the last leader it saw while it cannot reach the server, then
/// reports the new leader, with its term, and nothing else: neither the old leader again nor
/// "nobody"; `leader()` on its locker agrees. Twice: a short cut (a quarter of `session`, at least
/// 1 s), and one of twice `session`, after which a session backend goes on with a new session. A second observer
/// on the same locker sees the first handover too and is then dropped (after the reconnection):
/// the first one goes on seeing. At the end it sees nobody lead.
///
/// `upstream` is the server's `host:port` (the one [`Harness::locker`]'s lockers use: they are the
/// candidates, never cut); `connect(addr)` returns a new [`Locker`] for the server at `addr`,
/// with `session` as its session timeout or lease TTL, and short connect and request timeouts.
pub async fn election_observer_rides_out_outages<F, Fut>(
    h: &impl Harness,
    upstream: &str,
    session: Duration,
    connect: F,
) where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Locker>,
{
    let name = unique_name("elect_outage");
    let key = lock_name(&name);
    let limit = patience(h).max(Duration::from_secs(30)) + session * 2;
    let proxy = Proxy::start(upstream).await;
    let observer = connect(proxy.addr()).await;
    let election = observer.election(&name);
    let mut observed = election.observe().await.expect("observe");
    let mut second = Some(election.observe().await.expect("observe"));
    let first = h.locker().await;
    let mut leader = first
        .election(&name)
        .campaign("leader-0")
        .acquire()
        .await
        .expect("campaign");
    observe_until(&mut observed, Some("leader-0"), limit).await;
    observe_until(second.as_mut().expect("second observer"), Some("leader-0"), limit).await;

    let short = (session / 4).max(Duration::from_secs(1));
    for (i, cut) in [short, session * 2].into_iter().enumerate() {
        let value = format!("leader-{}", i + 1);
        let (locker, campaign_name, campaign_value) = (h.locker().await, name.clone(), value.clone());
        let next = tokio::spawn(async move {
            locker
                .election(&campaign_name)
                .campaign(campaign_value)
                .acquire()
                .await
                .expect("campaign")
        });
        wait_for_residue_in(h, Family::Election, &key, 2).await;
        mark_seen(&mut observed).await;
        let last_seen = observed.leader().map(|l| (l.value, l.term));
        assert_eq!(
            last_seen.as_ref().map(|(_, term)| *term),
            Some(leader.term()),
            "before cut {i}"
        );

        proxy.set(Mode::Cut);
        let cut_at = Instant::now();
        leader.resign().await.expect("resign");
        leader = within(limit, "the next leader, during the cut", next)
            .await
            .expect("campaign task");
        tokio::time::sleep_until(cut_at + cut).await;
        assert_eq!(
            observed.leader().map(|l| (l.value, l.term)),
            last_seen,
            "cut {i} ({cut:?}): the observer cannot reach the server and must keep the last leader it saw"
        );
        proxy.set(Mode::Forward);

        let expected = Some((value.clone(), leader.term()));
        let mut values = Vec::new();
        within(limit, &format!("observing {value} after cut {i} ({cut:?})"), async {
            while values.last() != Some(&expected) {
                let now = observed.changed().await.expect("the observation ended");
                values.push(now.map(|l| (l.value, l.term)));
            }
        })
        .await;
        assert!(
            values.iter().all(|v| *v == expected),
            "after cut {i} ({cut:?}) the observer reported {values:?}, not only the new leader {expected:?}"
        );
        let read = within(limit, "leader() through the proxy after the cut", async {
            loop {
                match election.leader().await {
                    Ok(read) => return read,
                    Err(e) => {
                        tracing::debug!(error = %e, "leader() not yet");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        })
        .await;
        assert_eq!(read.map(|l| (l.value, l.term)), expected, "leader() after cut {i}");
        if let Some(mut other) = second.take() {
            let term = observe_until(&mut other, Some(value.as_str()), limit).await;
            assert_eq!(term, Some(leader.term()), "the second observer");
            drop(other); // after the reconnection: the first observer goes on alone
        }
    }
    leader.resign().await.expect("resign");
    observe_until(&mut observed, None, limit).await;
    wait_for_residue_in(h, Family::Election, &key, 0).await;
}

/// Marks every change `watch` reported so far as seen ([`observe_until`] may leave the last one
/// unseen), so that its next `changed()` returns only what is reported from now on.
async fn mark_seen(watch: &mut LeaderWatch) {
    // A zero timeout still polls `changed()` once: a change not yet seen returns at once.
    while let Ok(changed) = tokio::time::timeout(Duration::ZERO, watch.changed()).await {
        changed.expect("the observation ended");
    }
}

/// A watch of an election ends once its locker is shut down: `changed()` answers `Closed` (it
/// waited for ever on ZooKeeper and PostgreSQL, whose observers retried a shut-down session),
/// and reads of the leader after the shutdown answer `Closed` too.
pub async fn election_watch_ends_at_shutdown(h: &impl Harness) {
    let name = unique_name("elect_shutdown");
    let locker = h.locker().await;
    let mut watch = locker.election(&name).observe().await.expect("observe");
    locker.shutdown().await.expect("shutdown");
    let ended = tokio::time::timeout(Duration::from_secs(5), watch.changed()).await;
    assert!(
        matches!(ended, Ok(Err(LockError::Closed))),
        "a watch of a shut-down locker: {ended:?}"
    );
    let leader = locker.election(&name).leader().await;
    assert!(
        matches!(leader, Err(LockError::Closed)),
        "leader() after shutdown: {leader:?}"
    );
    let observe = locker.election(&name).observe().await.map(|_| ());
    assert!(
        matches!(observe, Err(LockError::Closed)),
        "observe() after shutdown: {observe:?}"
    );
}

/// A permit, a reader, a writer and a leader whose entry is removed on the server behind their
/// backs are each told (`lost()`, not held any more, a release or resignation answers
/// `NotHeld`), and the lock is free for others afterwards (as
/// [`super::mutex::lost_fires_when_removed_behind_back`] for a mutex).
pub async fn every_kind_is_told_when_removed_behind_back(h: &impl Harness) {
    let name = unique_name("kinds_lost");
    let key = LockName::new(&name).expect("name");
    let (a, b) = (h.locker().await, h.locker().await);
    let ttl = h.short_ttl();
    let builders: [(&str, Family, Builder); 3] = [
        ("a permit", Family::Semaphore, |l, n| l.semaphore(n, 2)),
        ("a reader", Family::RwLock, |l, n| l.rwlock(n).read()),
        ("a writer", Family::RwLock, |l, n| l.rwlock(n).write()),
    ];
    for (what, family, builder) in builders {
        let guard = builder(&a, &name).ttl(ttl).acquire().await.expect("acquire");
        let lost = guard.lost();
        h.delete_behind_back_in(family, &key).await;
        let reason = within(patience(h), &format!("lost() of {what} removed"), lost).await;
        assert!(
            matches!(reason, LostReason::LeaseGone(_) | LostReason::RenewalFailed(_)),
            "{what}: {reason:?}"
        );
        assert!(!guard.is_held(), "{what} still says it is held");
        let other = within(
            patience(h),
            &format!("{what} after the removal"),
            builder(&b, &name).acquire(),
        )
        .await
        .expect("acquire");
        assert!(
            matches!(guard.release().await, Err(LockError::NotHeld { .. })),
            "{what}: a release of a removed lock"
        );
        other.release().await.expect("release");
    }
    let lead = a
        .election(&name)
        .campaign("a")
        .ttl(ttl)
        .acquire()
        .await
        .expect("campaign");
    let lost = lead.lost();
    h.delete_behind_back_in(Family::Election, &key).await;
    let reason = within(patience(h), "lost() of a leader removed", lost).await;
    assert!(
        matches!(reason, LostReason::LeaseGone(_) | LostReason::RenewalFailed(_)),
        "a leader: {reason:?}"
    );
    assert!(!lead.is_leader(), "a removed leader still says it leads");
    let next = within(
        patience(h),
        "a leader after the removal",
        b.election(&name).campaign("b").acquire(),
    )
    .await
    .expect("campaign");
    assert!(
        matches!(lead.resign().await, Err(LockError::NotHeld { .. })),
        "a resignation of a removed leader"
    );
    next.resign().await.expect("resign");
    for family in [Family::Semaphore, Family::RwLock, Family::Election] {
        wait_for_residue_in(h, family, &key, 0).await;
    }
}

/// A release of a permit, a reader or a writer, and a resignation, cut off mid-flight, still
/// free the lock, as [`super::lifecycle::release_cancelled_mid_flight_releases`] shows for a
/// mutex: the guard's own `release()` dropped after 1 ms, and the backend's `release` dropped at
/// its first await point (with another lock held on the same connection, whose renewals keep its
/// session alive). Checked by a client that can only get in once the lock is free: a 1-permit
/// semaphore's next permit, a writer after a reader or a writer, the next leader; within two
/// thirds of the lock's TTL (15 s where the TTL is per lock, the session's on etcd and
/// ZooKeeper), so that its expiry cannot stand in for the release.
pub async fn every_kind_released_mid_flight_is_free(h: &impl Harness) {
    const LONG_TTL: Duration = Duration::from_secs(15);
    let (a, b) = (h.locker().await, h.locker().await);
    let other = a
        .lock(unique_name("kinds_cut_other"))
        .acquire()
        .await
        .expect("acquire other");
    let kinds: [(&str, Builder, Builder); 3] = [
        ("a permit", |l, n| l.semaphore(n, 1), |l, n| l.semaphore(n, 1)),
        ("a reader", |l, n| l.rwlock(n).read(), |l, n| l.rwlock(n).write()),
        ("a writer", |l, n| l.rwlock(n).write(), |l, n| l.rwlock(n).write()),
    ];
    for (what, take, next) in kinds {
        for whose in ["the guard's", "the backend's"] {
            let name = unique_name("kinds_cut");
            let guard = take(&a, &name).ttl(LONG_TTL).acquire().await.expect("acquire");
            let bound = guard.ttl().min(patience(h)) * 2 / 3;
            match whose {
                "the guard's" => {
                    let cut = tokio::time::timeout(Duration::from_millis(1), guard.release()).await;
                    tracing::debug!(finished = cut.is_ok(), what, "release cut off after 1ms");
                }
                _ => cut_backend_release(&a, &guard.abandon()).await,
            }
            let step = format!("{what} after {whose} release was cut off");
            let freed = within(bound, &step, next(&b, &name).acquire()).await;
            freed.expect("acquire").release().await.expect("release");
        }
    }
    for whose in ["the leadership's", "the backend's"] {
        let name = unique_name("kinds_cut_lead");
        let lead = a
            .election(&name)
            .campaign("a")
            .ttl(LONG_TTL)
            .acquire()
            .await
            .expect("campaign");
        let bound = lead.guard().ttl().min(patience(h)) * 2 / 3;
        match whose {
            "the leadership's" => {
                let cut = tokio::time::timeout(Duration::from_millis(1), lead.resign()).await;
                tracing::debug!(finished = cut.is_ok(), "resignation cut off after 1ms");
            }
            _ => cut_backend_release(&a, &lead.abandon()).await,
        }
        let step = format!("a leader after {whose} resignation was cut off");
        let next = within(bound, &step, b.election(&name).campaign("b").acquire()).await;
        next.expect("campaign").resign().await.expect("resign");
    }
    other.release().await.expect("release other");
}

/// No name blocks another in any kind: `a` and `a/b`, `a` and `ab`, `a/` and `a` are independent
/// semaphores, read-write locks and elections too (as
/// [`super::mutex::names_are_independent`] checks for mutexes), and no election shows another
/// name's leader.
pub async fn every_kind_names_are_independent(h: &impl Harness) {
    let base = unique_name("kind-names");
    let (a, b) = (h.locker().await, h.locker().await);
    // Names of their own per pair: a name released by the pair before may not be free yet to
    // every client (a replica, a lagging master).
    for (i, (first, second)) in super::mutex::NESTED_NAMES.into_iter().enumerate() {
        let (first, second) = (format!("{base}/{i}/{first}"), format!("{base}/{i}/{second}"));
        let permit = a
            .semaphore(&first, 1)
            .try_acquire()
            .await
            .expect("try")
            .expect("the semaphore");
        let other = b.semaphore(&second, 1).try_acquire().await.expect("try");
        let other = other.unwrap_or_else(|| panic!("the semaphore {first:?} blocked {second:?}"));
        other.release().await.expect("release");
        let write = a
            .rwlock(&first)
            .write()
            .try_acquire()
            .await
            .expect("try")
            .expect("the rwlock");
        let other = b.rwlock(&second).write().try_acquire().await.expect("try");
        let other = other.unwrap_or_else(|| panic!("the rwlock {first:?} blocked {second:?}"));
        other.release().await.expect("release");
        let lead = a
            .election(&first)
            .campaign("first")
            .try_acquire()
            .await
            .expect("try")
            .expect("the election");
        let shown = b.election(&second).leader().await.expect("leader");
        assert!(
            shown.is_none(),
            "the election {second:?} shows {first:?}'s leader: {shown:?}"
        );
        let other = b.election(&second).campaign("second").try_acquire().await.expect("try");
        let other = other.unwrap_or_else(|| panic!("the election {first:?} blocked {second:?}"));
        let shown = b.election(&first).leader().await.expect("leader").map(|l| l.value);
        assert_eq!(shown.as_deref(), Some("first"), "{first:?} after {second:?}'s campaign");
        other.resign().await.expect("resign");
        lead.resign().await.expect("resign");
        write.release().await.expect("release");
        permit.release().await.expect("release");
    }
}
