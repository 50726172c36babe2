//! The semaphore suite ([`crate::Locker::semaphore`]): never more holders than permits, FIFO
//! waiting, one permit count per semaphore, expiry and cancellation as for a mutex.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::harness::{patience, unique_name, wait_for_residue_in, within, Harness};
use crate::name::LockName;
use crate::{Family, LockError, LockGuard, Locker, MAX_PERMITS};

fn lock_name(name: &str) -> LockName {
    LockName::new(name).expect("name")
}

/// Eight clients take and give back permits of a 3-permit semaphore: never more than 3 inside at
/// once, more than one at some point (it is not a mutex), every fencing token different.
///
/// A holder that is alone while no two have been seen yet stays (up to the harness's patience)
/// until a second one comes in: on a slow or loaded server the rounds could otherwise run one
/// after the other and a correct semaphore would look like a mutex. A semaphore that grants one
/// at a time still fails: its second holder never comes (after one such wait, none waits again).
pub async fn semaphore_never_over_grants(h: &impl Harness) {
    const PERMITS: u32 = 3;
    let name = unique_name("sem_bound");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let linger = patience(h);
    let gave_up = Arc::new(AtomicBool::new(false));
    let mut lockers = Vec::new();
    for _ in 0..8 {
        lockers.push(h.locker().await);
    }
    let mut tasks = Vec::new();
    for locker in lockers {
        let (name, inside, most, tokens) = (name.clone(), inside.clone(), most.clone(), tokens.clone());
        let gave_up = gave_up.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let permit = locker
                    .semaphore(&name, PERMITS)
                    .acquire()
                    .await
                    .expect("acquire a permit");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= PERMITS as usize, "{now} holders of a {PERMITS}-permit semaphore");
                tokens
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(permit.fencing_token());
                tokio::time::sleep(Duration::from_millis(20)).await;
                let alone_since = tokio::time::Instant::now();
                while most.load(Ordering::SeqCst) < 2 && !gave_up.load(Ordering::SeqCst) {
                    if alone_since.elapsed() >= linger {
                        gave_up.store(true, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.expect("release");
            }
        }));
    }
    within(Duration::from_secs(120) + linger, "the semaphore rounds", async {
        for t in tasks {
            t.await.expect("client task panicked");
        }
    })
    .await;
    assert!(
        most.load(Ordering::SeqCst) >= 2,
        "never two holders at once: the semaphore behaves as a mutex"
    );
    let tokens = tokens.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let unique: HashSet<u64> = tokens.iter().copied().collect();
    assert_eq!(
        unique.len(),
        tokens.len(),
        "two permits with one fencing token: {tokens:?}"
    );
    wait_for_residue_in(h, Family::Semaphore, &lock_name(&name), 0).await;
}

/// `try_acquire` gets a permit while one is free and `None` once all are held; tokens grow with
/// every grant.
pub async fn semaphore_try_acquire_when_full(h: &impl Harness) {
    let name = unique_name("sem_try");
    let (a, b, c) = (h.locker().await, h.locker().await, h.locker().await);
    let first = a
        .semaphore(&name, 2)
        .try_acquire()
        .await
        .expect("try")
        .expect("a free permit");
    let second = b
        .semaphore(&name, 2)
        .try_acquire()
        .await
        .expect("try")
        .expect("the second permit");
    assert!(second.fencing_token() > first.fencing_token());
    assert!(
        c.semaphore(&name, 2).try_acquire().await.expect("try").is_none(),
        "a third permit of two"
    );
    first.release().await.expect("release");
    let third = c
        .semaphore(&name, 2)
        .try_acquire()
        .await
        .expect("try")
        .expect("a freed permit");
    assert!(third.fencing_token() > second.fencing_token());
    second.release().await.expect("release");
    third.release().await.expect("release");
    wait_for_residue_in(h, Family::Semaphore, &lock_name(&name), 0).await;
}

/// Waiters for a full semaphore get permits in the order they started waiting, whichever holder
/// releases.
pub async fn semaphore_waiters_are_fifo(h: &impl Harness) {
    let name = unique_name("sem_fifo");
    let key = lock_name(&name);
    let Queue {
        a: _,
        held_a,
        held_b,
        mut waiters,
        mut order,
    } = full_with_three_waiters(h, &name).await;
    held_b.release().await.expect("release");
    let (w, t0) = next(&mut order, patience(h)).await;
    assert_eq!(w, 0, "the first waiter must get the first freed permit");
    held_a.release().await.expect("release");
    let (w, t1) = next(&mut order, patience(h)).await;
    assert_eq!(w, 1, "the second waiter must get the second freed permit");
    assert!(t1 > t0, "fencing tokens out of grant order: {t0} then {t1}");
    let first = waiters.remove(0).await.expect("waiter");
    first.release().await.expect("release");
    let (w, t2) = next(&mut order, patience(h)).await;
    assert_eq!(w, 2);
    assert!(t2 > t1);
    for w in waiters {
        w.await.expect("waiter").release().await.expect("release");
    }
    wait_for_residue_in(h, Family::Semaphore, &key, 0).await;
}

/// A waiter cancelled in the middle of a 2-permit semaphore's queue takes no permit and holds
/// nobody up: the waiters on either side of it get the two permits the holders free, in order,
/// and afterwards both permits are free.
pub async fn semaphore_cancelled_middle_waiter_takes_nothing(h: &impl Harness) {
    let name = unique_name("sem_middle");
    let key = lock_name(&name);
    let Queue {
        a,
        held_a,
        held_b,
        mut waiters,
        mut order,
    } = full_with_three_waiters(h, &name).await;
    let middle = waiters.remove(1);
    middle.abort();
    assert!(
        middle.await.is_err_and(|e| e.is_cancelled()),
        "the middle waiter was granted"
    );
    wait_for_residue_in(h, Family::Semaphore, &key, 4).await;
    held_b.release().await.expect("release");
    let (w, t0) = next(&mut order, patience(h)).await;
    assert_eq!(w, 0, "the first waiter must get the first freed permit");
    held_a.release().await.expect("release");
    let (w, t1) = next(&mut order, patience(h)).await;
    assert_eq!(w, 2, "the last waiter must get the second freed permit");
    assert!(t1 > t0, "fencing tokens out of grant order: {t0} then {t1}");
    for w in waiters {
        w.await.expect("waiter").release().await.expect("release");
    }
    wait_for_residue_in(h, Family::Semaphore, &key, 0).await;
    let mut free = Vec::new();
    for _ in 0..2 {
        let permit = a.semaphore(&name, 2).try_acquire().await.expect("try");
        free.push(permit.expect("both permits free after the cancellation"));
    }
    for permit in free {
        permit.release().await.expect("release");
    }
}

/// A client that asks for another permit count than the semaphore's holders is refused with
/// `InvalidOption`, by `try_acquire` and `acquire`, and leaves nothing behind; once the
/// semaphore is unused, another count is fine.
pub async fn semaphore_permit_counts_must_agree(h: &impl Harness) {
    let name = unique_name("sem_count");
    let key = lock_name(&name);
    let (a, b) = (h.locker().await, h.locker().await);
    let held = a.semaphore(&name, 3).acquire().await.expect("acquire");
    let tried = b.semaphore(&name, 2).try_acquire().await;
    assert!(matches!(tried, Err(LockError::InvalidOption(_))), "{tried:?}");
    let waited = within(
        patience(h),
        "acquire with a mismatched count",
        b.semaphore(&name, 2).timeout(Duration::from_secs(5)).acquire(),
    )
    .await;
    assert!(matches!(waited, Err(LockError::InvalidOption(_))), "{waited:?}");
    wait_for_residue_in(h, Family::Semaphore, &key, 1).await;
    // The same count is fine meanwhile.
    let also = b
        .semaphore(&name, 3)
        .try_acquire()
        .await
        .expect("try")
        .expect("a second permit of 3");
    also.release().await.expect("release");
    held.release().await.expect("release");
    wait_for_residue_in(h, Family::Semaphore, &key, 0).await;
    let fresh = b
        .semaphore(&name, 2)
        .try_acquire()
        .await
        .expect("try")
        .expect("an unused semaphore");
    fresh.release().await.expect("release");
}

/// A permit whose holder stops renewing (crashed) expires after its TTL, and a waiter gets it.
pub async fn semaphore_crashed_holder_expires(h: &impl Harness) {
    let name = unique_name("sem_crash");
    let (a, b) = (h.locker().await, h.locker().await);
    let ttl = h.short_ttl();
    let crashed = a.semaphore(&name, 1).ttl(ttl).acquire().await.expect("acquire");
    let token = crashed.fencing_token();
    let _lease = crashed.abandon();
    let next = within(
        patience(h),
        "a permit after its holder crashed",
        b.semaphore(&name, 1).ttl(ttl).acquire(),
    )
    .await
    .expect("acquire");
    assert!(next.fencing_token() > token);
    next.release().await.expect("release");
}

/// Cancelled and timed-out waits for a full semaphore leave no entry behind.
pub async fn semaphore_cancellation_leaves_nothing(h: &impl Harness) {
    let name = unique_name("sem_cancel");
    let key = lock_name(&name);
    let (a, b) = (h.locker().await, h.locker().await);
    let held = a.semaphore(&name, 1).acquire().await.expect("acquire");
    for i in 0..6u64 {
        let attempt = b
            .semaphore(&name, 1)
            .timeout(Duration::from_millis(20 * i + 1))
            .acquire();
        let dropped = tokio::time::timeout(Duration::from_millis(10 * i + 1), attempt).await;
        if let Ok(result) = dropped {
            assert!(matches!(result, Err(LockError::Timeout(_))), "{result:?}");
        }
    }
    wait_for_residue_in(h, Family::Semaphore, &key, 1).await;
    held.release().await.expect("release");
    wait_for_residue_in(h, Family::Semaphore, &key, 0).await;
    let free = b
        .semaphore(&name, 1)
        .try_acquire()
        .await
        .expect("try")
        .expect("free after the cancellations");
    free.release().await.expect("release");
}

/// A 2-permit semaphore held by two lockers, with three waiters queued in order.
struct Queue {
    /// The first holder's locker.
    a: Locker,
    held_a: LockGuard,
    held_b: LockGuard,
    /// The waiters' tasks, in queue order: each returns its permit.
    waiters: Vec<tokio::task::JoinHandle<LockGuard>>,
    /// `(waiter, fencing token)` of each grant, in grant order.
    order: tokio::sync::mpsc::UnboundedReceiver<(usize, u64)>,
}

/// The semaphore `name` made a [`Queue`].
async fn full_with_three_waiters(h: &impl Harness, name: &str) -> Queue {
    let key = lock_name(name);
    let (a, b) = (h.locker().await, h.locker().await);
    let held_a = a.semaphore(name, 2).acquire().await.expect("acquire");
    let held_b = b.semaphore(name, 2).acquire().await.expect("acquire");
    let (tx, order) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..3 {
        let locker = h.locker().await;
        let (name, tx) = (name.to_owned(), tx.clone());
        waiters.push(tokio::spawn(async move {
            let permit = locker.semaphore(&name, 2).acquire().await.expect("acquire");
            let _ = tx.send((i, permit.fencing_token()));
            permit
        }));
        wait_for_residue_in(h, Family::Semaphore, &key, 3 + i).await;
    }
    Queue {
        a,
        held_a,
        held_b,
        waiters,
        order,
    }
}

/// The next grant a waiter reports (within `limit`).
async fn next(order: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, u64)>, limit: Duration) -> (usize, u64) {
    within(limit, "the next permit", order.recv()).await.expect("a grant")
}

/// No permits, or more than [`MAX_PERMITS`], is `InvalidOption`.
pub async fn bad_permit_counts_are_rejected(h: &impl Harness) {
    let locker = h.locker().await;
    let name = unique_name("sem_bad");
    for permits in [0, MAX_PERMITS + 1, u32::MAX] {
        let result = locker.semaphore(&name, permits).try_acquire().await;
        assert!(
            matches!(result, Err(LockError::InvalidOption(_))),
            "{permits}: {result:?}"
        );
    }
}
