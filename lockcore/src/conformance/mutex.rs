//! The mutex suite: exclusion, timeouts, cancellation, expiry, renewal, fencing, loss, FIFO order,
//! bad input and `inspect`, for every backend ([`conformance_tests!`](crate::conformance_tests)).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::harness::{patience, unique_name, until_waiters, wait_for_residue, within, Harness};
use crate::name::LockName;
use crate::{LockError, LockGuard, Locker, LostReason};

/// N clients on separate connections increment a shared counter non-atomically inside the lock:
/// no update is lost, no client ever enters while another is inside, and fencing tokens increase
/// in the order the critical sections ran.
pub async fn mutual_exclusion(h: &impl Harness) {
    const CLIENTS: u64 = 6;
    const ROUNDS: u64 = 10;
    let name = unique_name("mutual_exclusion");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let last_token = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let locker = h.locker().await;
        let (name, counter, inside, last_token) = (name.clone(), counter.clone(), inside.clone(), last_token.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locker.lock(&name).acquire().await.expect("acquire");
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "two holders inside the critical section"
                );
                let token = guard.fencing_token();
                let previous = last_token.swap(token, Ordering::SeqCst);
                assert!(
                    token > previous,
                    "fencing token {token} not above the previous holder's {previous}"
                );
                let v = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                counter.store(v + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    within(Duration::from_secs(120), "mutual exclusion rounds", async {
        for t in tasks {
            t.await.expect("client task panicked");
        }
    })
    .await;
    assert_eq!(
        counter.load(Ordering::SeqCst),
        CLIENTS * ROUNDS,
        "an increment was lost"
    );
    wait_for_residue(h, &LockName::new(&name).unwrap(), 0).await;
}

/// `try_acquire` returns `None` while the lock is held and `Some` after release.
pub async fn try_acquire_while_held(h: &impl Harness) {
    let name = unique_name("try_acquire");
    let (a, b) = (h.locker().await, h.locker().await);
    let held = a
        .lock(&name)
        .try_acquire()
        .await
        .expect("try")
        .expect("free lock must be taken");
    assert!(
        b.lock(&name).try_acquire().await.expect("try").is_none(),
        "held lock taken twice"
    );
    assert!(
        a.lock(&name).try_acquire().await.expect("try").is_none(),
        "not reentrant"
    );
    held.release().await.expect("release");
    let again = b
        .lock(&name)
        .try_acquire()
        .await
        .expect("try")
        .expect("released lock must be free");
    again.release().await.expect("release");
}

/// `acquire` with a timeout returns [`LockError::Timeout`] no earlier than the timeout (also a
/// timeout of a few milliseconds, shorter than the waiter's round trips), and leaves no waiter
/// behind.
pub async fn acquire_times_out(h: &impl Harness) {
    let name = unique_name("timeout");
    let (a, b) = (h.locker().await, h.locker().await);
    let held = a.lock(&name).acquire().await.expect("acquire");
    let timeout = Duration::from_millis(300);
    let start = Instant::now();
    let result = within(
        patience(h),
        "acquire with a timeout",
        b.lock(&name).timeout(timeout).acquire(),
    )
    .await;
    assert!(
        matches!(result, Err(LockError::Timeout(t)) if t == timeout),
        "expected Timeout, got {result:?}"
    );
    assert!(start.elapsed() >= timeout, "gave up before the timeout");
    // Timeouts shorter than a few round trips end at the deadline too, in the middle of joining
    // or watching: still a lock held by another (Timeout), not a server that did not answer.
    for ms in [1, 2, 3, 5, 10, 20] {
        let short = Duration::from_millis(ms);
        let result = within(
            patience(h),
            "acquire with a short timeout",
            b.lock(&name).timeout(short).acquire(),
        )
        .await;
        assert!(
            matches!(result, Err(LockError::Timeout(t)) if t == short),
            "expected Timeout after {ms} ms, got {result:?}"
        );
    }
    wait_for_residue(h, &held.lease().name, 1).await;
    // A zero timeout is one attempt: Timeout while held, the lock once free.
    let once = b.lock(&name).timeout(Duration::ZERO).acquire().await;
    assert!(
        matches!(once, Err(LockError::Timeout(t)) if t.is_zero()),
        "expected Timeout, got {once:?}"
    );
    held.release().await.expect("release");
    let free = b
        .lock(&name)
        .timeout(Duration::ZERO)
        .acquire()
        .await
        .expect("a free lock with a zero timeout");
    free.release().await.expect("release");
}

/// A dropped (cancelled) `acquire` leaves nothing behind: the next waiter gets the lock as soon as
/// the holder releases, although the cancelled waiter's connection is still open.
pub async fn cancelled_acquire_leaves_nothing(h: &impl Harness) {
    let name = unique_name("cancel");
    let lock_name = LockName::new(&name).unwrap();
    let (a, b, c) = (h.locker().await, h.locker().await, h.locker().await);
    let held = a.lock(&name).acquire().await.expect("acquire");
    let cancelled = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).acquire().await }
    });
    wait_for_residue(h, &lock_name, 2).await;
    cancelled.abort();
    assert!(cancelled.await.is_err_and(|e| e.is_cancelled()));
    wait_for_residue(h, &lock_name, 1).await;
    let next = tokio::spawn({
        let (c, name) = (c.clone(), name.clone());
        async move { c.lock(&name).acquire().await }
    });
    wait_for_residue(h, &lock_name, 2).await;
    held.release().await.expect("release");
    let guard = within(patience(h), "the waiter after a cancelled one", next)
        .await
        .unwrap()
        .expect("acquire");
    guard.release().await.expect("release");
    wait_for_residue(h, &lock_name, 0).await;
    drop(b); // the cancelled waiter's connection stayed open until here
}

/// A timeout that strikes while the backend is granting leaves no lease behind either: many short
/// timeouts racing a release never leave the lock held by nobody.
pub async fn cancellation_after_grant_leaves_nothing(h: &impl Harness) {
    let name = unique_name("cancel_grant");
    let lock_name = LockName::new(&name).unwrap();
    let (a, b) = (h.locker().await, h.locker().await);
    for i in 0..20u64 {
        let held = a.lock(&name).acquire().await.expect("acquire");
        let waiter = tokio::spawn({
            let (b, name) = (b.clone(), name.clone());
            // Timeouts from 0 to ~10 ms: some strike before, some during, some after the grant.
            async move { b.lock(&name).timeout(Duration::from_micros(i * 500)).acquire().await }
        });
        tokio::time::sleep(Duration::from_micros(i * 250)).await;
        held.release().await.expect("release");
        if let Ok(guard) = waiter.await.unwrap() {
            guard.release().await.expect("release");
        }
    }
    wait_for_residue(h, &lock_name, 0).await;
    let last = within(patience(h), "the lock after racing timeouts", a.lock(&name).acquire()).await;
    last.expect("acquire").release().await.expect("release");
}

/// How a storm attempt is cancelled.
#[derive(Clone, Copy, Debug)]
enum Cancel {
    /// The `acquire` future is dropped (an outer `tokio::time::timeout`, a `select!`).
    Drop,
    /// The builder's own `.timeout()`.
    Timeout,
    /// A `try_acquire` future is dropped.
    DropTry,
}

/// When a storm attempt is cancelled: half of them within the first 3 ms (while the request that
/// queues the waiter is in flight), half anywhere in 0-300 ms (while it waits).
fn storm_delay(i: usize) -> Duration {
    if i.is_multiple_of(2) {
        Duration::from_micros(rand::random_range(0..3_000))
    } else {
        Duration::from_micros(rand::random_range(0..300_000))
    }
}

/// One storm attempt on `name`, cancelled after `delay`; a lock it is granted anyway (the lock was
/// free) is released at once.
async fn storm_attempt(locker: Locker, name: String, cancel: Cancel, delay: Duration) {
    let start = Instant::now();
    let granted = match cancel {
        Cancel::Drop => tokio::time::timeout(delay, locker.lock(&name).acquire()).await.ok(),
        Cancel::Timeout => Some(locker.lock(&name).timeout(delay).acquire().await),
        Cancel::DropTry => match tokio::time::timeout(delay, locker.lock(&name).try_acquire()).await {
            Ok(Ok(Some(guard))) => Some(Ok(guard)),
            Ok(Ok(None)) | Err(_) => None,
            Ok(Err(e)) => Some(Err(e)),
        },
    };
    match granted {
        None | Some(Err(LockError::Timeout(_))) => {}
        // A server slowed down by the storm itself (an etcd write waits for its disk) may still be
        // answering a request when the deadline has long passed: the Locker gives up on it as a
        // server that did not answer. That is a cancellation too.
        Some(Err(LockError::Unavailable { .. })) if start.elapsed() >= delay => {}
        Some(Ok(guard)) => guard.release().await.expect("release of a storm grant"),
        Some(Err(e)) => panic!("storm attempt ({cancel:?} after {delay:?}) failed: {e}"),
    }
}

/// Runs `attempts` storm attempts on randomly chosen `names`, spread over `lockers`, ten in flight
/// per locker. Many names, so that a connection rarely tries one name twice: a later attempt must
/// not be what cleans up after an earlier one.
async fn storm(lockers: &[Locker], names: &[String], attempts: usize, modes: &[Cancel]) {
    let connections = lockers.len();
    let mut drivers = tokio::task::JoinSet::new();
    for (c, locker) in lockers.iter().enumerate() {
        let (locker, names, modes) = (locker.clone(), names.to_vec(), modes.to_vec());
        drivers.spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            for i in (c..attempts).step_by(connections) {
                if tasks.len() >= 10 {
                    tasks
                        .join_next()
                        .await
                        .expect("a task")
                        .expect("storm attempt panicked");
                }
                let cancel = modes[(i / 2) % modes.len()];
                let name = names[rand::random_range(0..names.len())].clone();
                tasks.spawn(storm_attempt(locker.clone(), name, cancel, storm_delay(i)));
            }
            while let Some(done) = tasks.join_next().await {
                done.expect("storm attempt panicked");
            }
        });
    }
    within(Duration::from_secs(300), "the cancellation storm", async {
        while let Some(done) = drivers.join_next().await {
            done.expect("storm driver panicked");
        }
    })
    .await;
}

/// Every one of `names` is free right now: one `try_acquire` takes it.
async fn all_free_at_once(locker: &Locker, names: &[String], after: &str) {
    for name in names {
        let guard = locker
            .lock(name)
            .try_acquire()
            .await
            .expect("try")
            .unwrap_or_else(|| panic!("{name} must be free at once {after}: a cancelled attempt was left behind"));
        guard.release().await.expect("release");
    }
}

/// A thousand acquires cancelled at random points (dropped futures and builder timeouts, while
/// the request that queues them is in flight and while they wait), over ten connections that each
/// hold another lock all along — so no session of theirs ever expires and a leaked waiter entry
/// would stay for good — leave no waiter entry behind, and every lock is free at once when its
/// holder releases. Then the same with the locks free, so that cancellations also strike grants
/// and `try_acquire`s in flight: no holder nobody knows about is left behind either.
pub async fn cancellation_storm_leaves_nothing(h: &impl Harness) {
    const CONNECTIONS: usize = 10;
    const NAMES: usize = 100;
    let base = unique_name("storm");
    let names: Vec<String> = (0..NAMES).map(|i| format!("{base}/{i}")).collect();
    let lock_names: Vec<LockName> = names.iter().map(|n| LockName::new(n).unwrap()).collect();
    let holder = h.sturdy_locker().await;
    let mut lockers = Vec::new();
    let mut sides = Vec::new();
    for _ in 0..CONNECTIONS {
        let locker = h.sturdy_locker().await;
        let side = locker
            .lock(unique_name("storm_side"))
            .acquire()
            .await
            .expect("side lock");
        sides.push(side);
        lockers.push(locker);
    }

    // The locks are held throughout: every attempt queues and is cancelled.
    let mut held = Vec::new();
    for name in &names {
        held.push(holder.lock(name).acquire().await.expect("acquire"));
    }
    storm(&lockers, &names, 1000, &[Cancel::Drop, Cancel::Timeout]).await;
    for name in &lock_names {
        wait_for_residue(h, name, 1).await;
    }
    for guard in held {
        guard.release().await.expect("release");
    }
    let fresh = h.sturdy_locker().await;
    all_free_at_once(&fresh, &names, "after its holder released").await;

    // The locks are free: cancellations race grants, and `try_acquire`s are dropped in flight.
    storm(&lockers, &names, 400, &[Cancel::Drop, Cancel::Timeout, Cancel::DropTry]).await;
    for name in &lock_names {
        wait_for_residue(h, name, 0).await;
    }
    all_free_at_once(&fresh, &names, "after the storm").await;

    for side in sides {
        assert!(side.is_held(), "a side lock was lost: {:?}", side.lost_reason());
        side.release().await.expect("release");
    }
}

/// A holder that stops renewing without releasing (a crash) loses the lock to a waiter after about
/// one TTL.
pub async fn crashed_holder_expires(h: &impl Harness) {
    let name = unique_name("crash");
    let (a, b) = (h.locker().await, h.locker().await);
    let ttl = h.short_ttl();
    let crashed = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    let token = crashed.fencing_token();
    let abandoned_at = Instant::now();
    let _lease = crashed.abandon();
    let next = within(
        patience(h),
        "taking over from a crashed holder",
        b.lock(&name).acquire(),
    )
    .await
    .expect("acquire");
    assert!(
        abandoned_at.elapsed() >= ttl / 2,
        "the lock passed on long before the crashed holder's TTL"
    );
    assert!(next.fencing_token() > token);
    assert!(next.lease().waited, "a takeover waited: {:?}", next.lease());
    next.release().await.expect("release");
}

/// A grant says whether it waited for another holder ([`crate::driver::Lease::waited`], which
/// the `locksmith_handovers_total` metric counts): an uncontended `try_acquire` or `acquire` did
/// not; a waiter granted when the holder releases did, however the backend hands the lock over
/// (a notification that is the grant, or a wake-up and a request).
pub async fn grants_say_whether_they_waited(h: &impl Harness) {
    let name = unique_name("waited");
    let lock_name = LockName::new(&name).unwrap();
    let (a, b) = (h.locker().await, h.locker().await);
    let tried = a.lock(&name).try_acquire().await.expect("try").expect("free");
    assert!(!tried.lease().waited, "an uncontended try_acquire: {:?}", tried.lease());
    tried.release().await.expect("release");
    let mut holder = a.lock(&name).acquire().await.expect("acquire");
    assert!(!holder.lease().waited, "an uncontended acquire: {:?}", holder.lease());
    // Four hand-overs, each the other way round: b waits for a, then a for b.
    for (turn, waiter) in [&b, &a, &b, &a].into_iter().enumerate() {
        let waiting = tokio::spawn({
            let (waiter, name) = (waiter.clone(), name.clone());
            async move { waiter.lock(&name).acquire().await }
        });
        wait_for_residue(h, &lock_name, 2).await;
        // The entry is there; give the waiter time to read the queue behind it too (ZooKeeper:
        // the listing sent with the create may be served after a delete that comes at once, and
        // the waiter then rightly finds the lock free).
        tokio::time::sleep(Duration::from_millis(150)).await;
        holder.release().await.expect("release");
        holder = within(patience(h), "waiter after release", waiting)
            .await
            .unwrap()
            .expect("acquire");
        assert!(holder.lease().waited, "hand-over {turn}: {:?}", holder.lease());
    }
    holder.release().await.expect("release");
}

/// A lock whose guard stops renewing expires after about one TTL even while the same connection
/// (and, on session backends, the same session) keeps other locks alive.
pub async fn abandoned_lock_expires_beside_held_ones(h: &impl Harness) {
    let (kept_name, abandoned_name) = (unique_name("kept"), unique_name("abandoned"));
    let (a, b) = (h.locker().await, h.locker().await);
    let ttl = h.short_ttl();
    let kept = a.lock(&kept_name).ttl(ttl).acquire().await.expect("acquire");
    let abandoned = a.lock(&abandoned_name).ttl(ttl).acquire().await.expect("acquire");
    let token = abandoned.fencing_token();
    let _lease = abandoned.abandon();
    let next = within(
        patience(h),
        "taking over a lock abandoned beside a held one",
        b.lock(&abandoned_name).acquire(),
    )
    .await
    .expect("acquire");
    assert!(next.fencing_token() > token);
    assert!(
        kept.is_held(),
        "the lock that was kept is lost: {:?}",
        kept.lost_reason()
    );
    assert!(
        b.lock(&kept_name).try_acquire().await.expect("try").is_none(),
        "the kept lock expired too"
    );
    next.release().await.expect("release");
    kept.release().await.expect("release");
}

/// The watchdog keeps a lock held well past its TTL.
pub async fn renewal_keeps_lock_past_ttl(h: &impl Harness) {
    let name = unique_name("renewal");
    let (a, b) = (h.locker().await, h.locker().await);
    let ttl = h.short_ttl();
    let guard = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    let until = Instant::now() + guard.ttl() * 3;
    while Instant::now() < until {
        assert!(
            b.lock(&name).try_acquire().await.expect("try").is_none(),
            "renewed lock was taken"
        );
        tokio::time::sleep(guard.ttl() / 4).await;
    }
    assert!(guard.is_held(), "lost: {:?}", guard.lost_reason());
    guard.release().await.expect("release");
}

/// Fencing tokens strictly increase across holders and connections.
pub async fn fencing_tokens_increase(h: &impl Harness) {
    let name = unique_name("fencing");
    let lockers = [h.locker().await, h.locker().await];
    let mut last = 0;
    for i in 0..6 {
        let guard = lockers[i % 2].lock(&name).acquire().await.expect("acquire");
        assert!(
            guard.fencing_token() > last,
            "token {} after {last}",
            guard.fencing_token()
        );
        last = guard.fencing_token();
        guard.release().await.expect("release");
    }
}

/// `lost()` fires when the lock is removed on the server behind the holder's back, and the lock is
/// free for others afterwards.
pub async fn lost_fires_when_removed_behind_back(h: &impl Harness) {
    let name = unique_name("lost");
    let (a, b) = (h.locker().await, h.locker().await);
    let guard = a.lock(&name).ttl(h.short_ttl()).acquire().await.expect("acquire");
    let lost = guard.lost();
    h.delete_behind_back(&guard.lease().name).await;
    let reason = within(patience(h), "lost() after the lock was removed", lost).await;
    assert!(
        matches!(reason, LostReason::LeaseGone(_) | LostReason::RenewalFailed(_)),
        "{reason:?}"
    );
    assert!(!guard.is_held());
    let other = within(patience(h), "acquiring a removed lock", b.lock(&name).acquire())
        .await
        .expect("acquire");
    assert!(matches!(guard.release().await, Err(LockError::NotHeld { .. })));
    assert!(other.is_held());
    other.release().await.expect("release");
}

/// A waiter whose entry an operator deletes while it waits is not handed the lock when the holder
/// releases on the strength of its old place: it and a contender that queued after the deletion
/// hold one at a time (the waiter, noticing, queues again; on the old etcd and ZooKeeper code
/// both were granted), with growing tokens, and nothing is left. `delete_waiter` removes the
/// entry of the mutex's first waiter on the server.
/// Not in [`conformance_tests!`](crate::conformance_tests): for the backends whose waiters
/// decide their own grant from an event (etcd, ZooKeeper), which call it from their own tests.
pub async fn a_waiter_deleted_behind_back_is_not_granted<F, Fut>(h: &impl Harness, delete_waiter: F)
where
    F: FnOnce(LockName) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let name = unique_name("waiter_deleted");
    let (holder, waiter, newcomer) = (h.locker().await, h.locker().await, h.locker().await);
    let spawn_acquire = |locker: &Locker| {
        let (locker, name) = (locker.clone(), name.clone());
        tokio::spawn(async move { locker.lock(&name).timeout(Duration::from_secs(30)).acquire().await })
    };
    // Each step then waits a little more, for the watches a waiter sets after its entry shows.
    let settle = || tokio::time::sleep(Duration::from_millis(300));
    let held = holder.lock(&name).acquire().await.expect("holder acquires");
    let first = spawn_acquire(&waiter);
    until_waiters(&holder, &name, 1, patience(h)).await;
    settle().await;
    delete_waiter(held.lease().name.clone()).await;
    settle().await;
    let second = spawn_acquire(&newcomer);
    until_waiters(&holder, &name, 1, patience(h)).await;
    settle().await;
    held.release().await.expect("holder releases");
    let case = "the waiter whose entry was deleted and the newcomer";
    granted_one_at_a_time(patience(h), [first, second], case).await;
    wait_for_residue(h, &LockName::new(&name).expect("a valid name"), 0).await;
}

/// The two `acquire` tasks of `contenders` (named `case` in a failure) hold one at a time: the
/// one granted first (within `limit`) holds alone for 500 ms and is not told it lost the lock;
/// once it releases, the other is granted (within `limit`), with a higher fencing token.
pub async fn granted_one_at_a_time(
    limit: Duration,
    contenders: [tokio::task::JoinHandle<crate::Result<LockGuard>>; 2],
    case: &str,
) {
    let [first, second] = contenders;
    let (one, mut other) = within(limit, "a hand-over", async {
        let (mut first, mut second) = (first, second);
        tokio::select! {
            guard = &mut first => (guard, second),
            guard = &mut second => (guard, first),
        }
    })
    .await;
    let one = one.expect("a task").expect("one of them acquires");
    match tokio::time::timeout(Duration::from_millis(500), &mut other).await {
        Err(_) => {}
        Ok(Ok(Ok(_))) => panic!("two holders: {case} were both handed the lock"),
        Ok(Ok(Err(e))) => panic!("{case}: the other contender's acquire failed instead of waiting: {e:?}"),
        Ok(Err(e)) => panic!("{case}: the other contender's task ended: {e}"),
    }
    assert!(
        one.is_held(),
        "{case}: the lock was handed to a contender that lost it at once"
    );
    let token = one.fencing_token();
    one.release().await.expect("the first releases");
    let two = within(limit, "the second hand-over", other)
        .await
        .expect("a task")
        .expect("the other acquires");
    assert!(two.fencing_token() > token, "{case}: tokens must grow");
    two.release().await.expect("the second releases");
}

/// Pairs of names of which one is a prefix of the other: each pair is two independent locks, of
/// every kind.
pub(super) const NESTED_NAMES: [(&str, &str); 6] = [
    ("a", "a/b"),
    ("a/b", "a"),
    ("a", "ab"),
    ("ab", "a"),
    ("a/", "a"),
    ("a", "a/"),
];

/// No name blocks another: `a` and `a/b`, `a` and `ab`, `a/` and `a` are independent locks.
pub async fn names_are_independent(h: &impl Harness) {
    let base = unique_name("names");
    let (a, b) = (h.locker().await, h.locker().await);
    for (first, second) in NESTED_NAMES.into_iter().chain([("x.y", "x%2Ey")]) {
        let first = format!("{base}/{first}");
        let second = format!("{base}/{second}");
        let held = a.lock(&first).acquire().await.expect("acquire");
        let other = b.lock(&second).try_acquire().await.expect("try");
        assert!(other.is_some(), "{first:?} blocked {second:?}");
        other.unwrap().release().await.expect("release");
        held.release().await.expect("release");
    }
    // Unusual but valid names work too.
    for odd in [
        "ä/ö/ü",
        " ",
        "..",
        "%",
        "*",
        "a\nb",
        &"n".repeat(crate::MAX_NAME_LEN - base.len() - 1),
    ] {
        let name = format!("{base}/{odd}");
        let g = a.lock(&name).try_acquire().await.expect("valid name").expect("free");
        assert!(b.lock(&name).try_acquire().await.expect("try").is_none());
        g.release().await.expect("release");
    }
}

/// Waiters get the lock in the order they started waiting.
pub async fn waiters_are_fifo(h: &impl Harness) {
    const WAITERS: usize = 5;
    let name = unique_name("fifo");
    let lock_name = LockName::new(&name).unwrap();
    let holder = h.locker().await.lock(&name).acquire().await.expect("acquire");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let locker = h.locker().await;
        let (name, order) = (name.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let guard = locker.lock(&name).acquire().await.expect("acquire");
            order.lock().unwrap().push(i);
            guard.release().await.expect("release");
        }));
        // The next waiter starts only once this one is queued on the server.
        wait_for_residue(h, &lock_name, i + 2).await;
    }
    holder.release().await.expect("release");
    within(patience(h) * 2, "all waiters served", async {
        for t in tasks {
            t.await.expect("waiter panicked");
        }
    })
    .await;
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
}

/// `max_hold` stops renewal and releases the lock when it passes, firing `lost()` first.
pub async fn max_hold_releases(h: &impl Harness) {
    let name = unique_name("max_hold");
    let (a, b) = (h.locker().await, h.locker().await);
    // A long TTL (the default, which every backend accepts): the lock must come free because of
    // max_hold, well before it could expire.
    let ttl = crate::DEFAULT_TTL;
    let guard = a
        .lock(&name)
        .ttl(ttl)
        .max_hold(Duration::from_millis(500))
        .acquire()
        .await
        .expect("acquire");
    let reason = within(ttl / 2, "lost() after max_hold", guard.lost()).await;
    assert_eq!(reason, LostReason::MaxHoldReached);
    assert!(!guard.is_held());
    let next = within(ttl / 2, "acquire after max_hold", b.lock(&name).acquire())
        .await
        .expect("acquire");
    next.release().await.expect("release");
    assert!(matches!(guard.release().await, Err(LockError::NotHeld { .. })));
}

/// Releasing a lease that is no longer ours returns [`LockError::NotHeld`].
pub async fn release_not_held_is_an_error(h: &impl Harness) {
    let name = unique_name("release_twice");
    let a = h.locker().await;
    let guard = a.lock(&name).acquire().await.expect("acquire");
    let lease = guard.lease().clone();
    guard.release().await.expect("release");
    let again = a.backend().release(&lease).await;
    assert!(matches!(again, Err(LockError::NotHeld { .. })), "{again:?}");
    let renew = a.backend().renew(&lease).await;
    assert!(matches!(renew, Err(LockError::NotHeld { .. })), "{renew:?}");
    // A newer holder is not disturbed by the stale lease.
    let newer = a.lock(&name).acquire().await.expect("acquire");
    assert!(a.backend().release(&lease).await.is_err());
    assert!(a.lock(&name).try_acquire().await.expect("try").is_none());
    newer.release().await.expect("release");
}

/// Dropping a guard releases the lock in the background.
pub async fn drop_releases(h: &impl Harness) {
    let name = unique_name("drop");
    let (a, b) = (h.locker().await, h.locker().await);
    let guard: LockGuard = a.lock(&name).ttl(crate::DEFAULT_TTL).acquire().await.expect("acquire");
    drop(guard);
    let next = within(crate::DEFAULT_TTL / 2, "acquire after drop", b.lock(&name).acquire())
        .await
        .expect("acquire");
    next.release().await.expect("release");
}

/// Bad names and options are rejected with clear errors before anything reaches the server.
pub async fn invalid_input_is_rejected(h: &impl Harness) {
    let a = h.locker().await;
    let long = "x".repeat(crate::MAX_NAME_LEN + 1);
    for bad in ["", "a\0b", long.as_str()] {
        assert!(
            matches!(a.lock(bad).acquire().await, Err(LockError::InvalidName(_))),
            "{bad:?}"
        );
        assert!(
            matches!(a.lock(bad).try_acquire().await, Err(LockError::InvalidName(_))),
            "{bad:?}"
        );
    }
    let name = unique_name("invalid");
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(1),
        crate::MAX_TTL + Duration::from_secs(1),
    ] {
        assert!(
            matches!(a.lock(&name).ttl(ttl).acquire().await, Err(LockError::InvalidOption(_))),
            "{ttl:?}"
        );
    }
    let zero_hold = a.lock(&name).max_hold(Duration::ZERO).try_acquire().await;
    assert!(matches!(zero_hold, Err(LockError::InvalidOption(_))));
    let absurd = a.lock(&name).timeout(Duration::MAX).acquire().await;
    assert!(matches!(absurd, Err(LockError::InvalidOption(_))));
    // A cap too far away to reach is no cap (it panicked after the grant, leaving the lock held).
    let uncapped = a
        .lock(&name)
        .max_hold(Duration::MAX)
        .acquire()
        .await
        .expect("max_hold(MAX)");
    assert_eq!(uncapped.lost_reason(), None);
    uncapped.release().await.expect("release");
    // Nothing was taken by the rejected requests.
    let g = a.lock(&name).try_acquire().await.expect("try").expect("free");
    g.release().await.expect("release");
}

/// `inspect` reports the holder (with the guard's holder id and, where stored, its fencing token)
/// and the number of waiters.
pub async fn inspect_reports_holder_and_waiters(h: &impl Harness) {
    let name = unique_name("inspect");
    let lock_name = LockName::new(&name).unwrap();
    let (a, b) = (h.locker().await, h.locker().await);
    let free = a.backend().inspect(&lock_name).await.expect("inspect");
    assert_eq!(free, crate::LockInfo::default());
    let guard = a.lock(&name).acquire().await.expect("acquire");
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).acquire().await }
    });
    wait_for_residue(h, &lock_name, 2).await;
    let info = a.backend().inspect(&lock_name).await.expect("inspect");
    let holder = info.holder.expect("a holder");
    assert_eq!(holder.holder_id, guard.lease().holder_id);
    assert!(holder.fencing_token.is_none_or(|t| t == guard.fencing_token()));
    assert!(holder.ttl_remaining.is_none_or(|t| t <= guard.ttl()));
    assert_eq!(info.waiters, 1);
    guard.release().await.expect("release");
    let next = within(patience(h), "waiter after release", waiter)
        .await
        .unwrap()
        .expect("acquire");
    next.release().await.expect("release");
}
