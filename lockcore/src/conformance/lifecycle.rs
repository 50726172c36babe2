//! The edges of a lock's life that no fault injects: a `release()` dropped mid-flight, a process
//! that exits right after an `acquire` timed out, a process that drops its guard and shuts its
//! [`Locker`] down before it exits. Nothing may be left held by a holder that is gone.
//!
//! A "process" here is a tokio runtime of its own on a thread of its own, with its own
//! [`Harness::locker`] (its own connection or session): when the body returns, the runtime is
//! shut down at once, and every task of it stops where it is, as at `exit` — a clean-up the
//! process left to a background task never runs.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use super::harness::{patience, unique_name, until_waiters, wait_for_residue, within, Builder, Harness};
use crate::name::LockName;
use crate::{Family, LockError, Locker, LostReason};

/// Runs `body` with a new locker in a "process" of its own (see the module docs) and returns its
/// output once the process is gone.
async fn in_a_process<H, F, Fut, T>(h: &H, body: F) -> T
where
    H: Harness,
    F: FnOnce(Locker) -> Fut + Send,
    Fut: Future<Output = T>,
    T: Send,
{
    in_a_process_on(h, tokio::runtime::Builder::new_multi_thread().worker_threads(1), body).await
}

/// [`in_a_process`] on a runtime of `builder`'s. On a current-thread runtime, the process's
/// spawned tasks run only while `body` waits: what a call leaves to them shows.
async fn in_a_process_on<H, F, Fut, T>(h: &H, builder: &mut tokio::runtime::Builder, body: F) -> T
where
    H: Harness,
    F: FnOnce(Locker) -> Fut + Send,
    Fut: Future<Output = T>,
    T: Send,
{
    let runtime = builder.enable_all().build().expect("a runtime for the process");
    tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let out = runtime.block_on(async {
                        let locker = h.locker().await;
                        body(locker).await
                    });
                    // `exit`: no task of the process runs again.
                    runtime.shutdown_background();
                    out
                })
                .join()
                .expect("the process panicked")
        })
    })
}

/// Takes `name` on `locker` as soon as it is free, within [`patience`]: the lock must come
/// without waiting for a TTL or for the end of a session.
async fn taken_within(h: &impl Harness, locker: &Locker, name: &str, what: &str) {
    let guard = within(patience(h), what, locker.lock(name).acquire())
        .await
        .expect("acquire");
    guard.release().await.expect("release");
}

/// A `release()` whose future is dropped before the backend answered (a timeout around it)
/// still releases: another client gets the lock, with and without other locks held on the
/// releasing connection (which keep its session alive).
pub async fn release_cancelled_mid_flight_releases(h: &impl Harness) {
    for other_held in [true, false] {
        let name = unique_name("release_cancelled");
        let (a, b) = (h.locker().await, h.locker().await);
        let other = match other_held {
            true => Some(
                a.lock(unique_name("release_cancelled_other"))
                    .acquire()
                    .await
                    .expect("acquire other"),
            ),
            false => None,
        };
        let guard = a.lock(&name).acquire().await.expect("acquire");
        let cut = tokio::time::timeout(Duration::from_millis(1), guard.release()).await;
        tracing::debug!(finished = cut.is_ok(), "release cut off after 1ms");
        let what = format!("the lock after a release cut off mid-flight (other lock held: {other_held})");
        taken_within(h, &b, &name, &what).await;
        wait_for_residue(h, &LockName::new(&name).unwrap(), 0).await;
        if let Some(other) = other {
            other.release().await.expect("release other");
        }
    }
}

/// The backend's own `release`, dropped at its first await point, still releases (the trait's
/// cancellation contract; the guard finishes a dropped release in a task of its own, so this is the case
/// of a release cut off by its request timeout): checked with another lock held on the same
/// connection, whose renewals keep the session alive.
pub async fn backend_release_cancelled_releases(h: &impl Harness) {
    let name = unique_name("backend_release_cancelled");
    let (a, b) = (h.locker().await, h.locker().await);
    let other = a
        .lock(unique_name("backend_release_other"))
        .acquire()
        .await
        .expect("acquire other");
    let lease = a.lock(&name).acquire().await.expect("acquire").abandon();
    cut_backend_release(&a, &lease).await;
    // Not waiting for a TTL: the abandoned lease would expire after its TTL anyway, and the other
    // lock keeps the connection's session alive meanwhile.
    let bound = lease.ttl.min(patience(h));
    let guard = within(
        bound,
        "the lock after the backend's release was dropped",
        b.lock(&name).acquire(),
    )
    .await
    .expect("acquire");
    guard.release().await.expect("release");
    other.release().await.expect("release other");
}

/// `locker`'s backend's own `release` of `lease`, dropped after one poll (which sends what the
/// backend sends first).
pub(crate) async fn cut_backend_release(locker: &Locker, lease: &crate::lease::Lease) {
    let backend = locker.backend().clone();
    let mut release = backend.release(lease);
    let polled = poll_once(release.as_mut()).await;
    drop(release);
    tracing::debug!(finished = polled, "backend release dropped after one poll");
}

/// Polls `fut` once; `true` if it finished. For a backend's own tests that drop a call at its
/// first await point.
pub async fn poll_once<F: Future + Unpin>(mut fut: F) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut fut).poll(cx).is_ready())).await
}

/// A process whose `acquire` timed out and that exits right after the error (`main` returning
/// through `?`) leaves no waiter behind: when the holder releases, the lock is free at once, not
/// held by the dead process's queue entry for the rest of its session.
pub async fn timed_out_waiter_that_exits_leaves_nothing(h: &impl Harness) {
    let name = unique_name("timeout_exit");
    let lock_name = LockName::new(&name).unwrap();
    let (holder, next) = (h.locker().await, h.locker().await);
    let held = holder.lock(&name).acquire().await.expect("acquire");
    let result = in_a_process(h, |locker| {
        let name = name.clone();
        async move {
            locker
                .lock(&name)
                .timeout(Duration::from_millis(300))
                .acquire()
                .await
                .map(drop)
        }
    })
    .await;
    assert!(
        matches!(result, Err(LockError::Timeout(_))),
        "expected Timeout, got {result:?}"
    );
    // The process is gone: what it left now is left for good (until its session expires).
    let left = h.residue(&lock_name).await;
    assert_eq!(
        left.len(),
        1,
        "a process that exited after a timeout left its queue entry: {left:?}"
    );
    held.release().await.expect("release");
    let guard = next.lock(&name).try_acquire().await.expect("try_acquire");
    assert!(
        guard.is_some(),
        "the lock was not free after its holder released: a dead waiter's entry holds it ({:?})",
        h.residue(&lock_name).await
    );
    drop(guard);
}

/// An `acquire` that waits in the queue and whose future is then dropped on a thread where no
/// runtime runs (moved into a plain thread; a synchronous `Drop`, another executor) leaves
/// nothing: its clean-up runs on the runtime the call started on. The waiting locker holds another
/// lock all along, which keeps its connection's session alive; the lock must come to the next
/// client within two thirds of the waiter's TTL (15 s where the TTL is per lock).
pub async fn acquire_dropped_where_no_runtime_runs_leaves_nothing(h: &impl Harness) {
    let name = unique_name("dropped_off_runtime");
    let (holder, waiter, next) = (h.locker().await, h.locker().await, h.locker().await);
    let other = waiter.lock(unique_name("dropped_off_runtime_other")).acquire().await;
    let other = other.expect("acquire other");
    let held = holder.lock(&name).acquire().await.expect("acquire");
    let ttl = Duration::from_secs(15);
    let mut waiting = Box::pin(waiter.lock(&name).ttl(ttl).acquire());
    tokio::select! {
        result = &mut waiting => panic!("the waiter was granted a held lock: {result:?}"),
        () = until_waiters(&holder, &name, 1, patience(h)) => {}
    }
    std::thread::spawn(move || drop(waiting))
        .join()
        .expect("the plain thread");
    held.release().await.expect("release");
    let bound = other.ttl().min(ttl).min(patience(h)) * 2 / 3;
    let guard = within(
        bound,
        "the lock after its waiter's acquire was dropped where no runtime runs",
        next.lock(&name).acquire(),
    )
    .await
    .expect("acquire");
    guard.release().await.expect("release");
    other.release().await.expect("release other");
    wait_for_residue(h, &LockName::new(&name).expect("name"), 0).await;
}

/// [`timed_out_waiter_that_exits_leaves_nothing`] for a waiting permit (of a 1-permit
/// semaphore), reader (behind a writer), writer (behind a reader) and candidate: each process
/// leaves no entry, and once the holder lets go, the lock is free at once.
pub async fn every_kind_timed_out_waiter_that_exits_leaves_nothing(h: &impl Harness) {
    let (holder, next) = (h.locker().await, h.locker().await);
    let kinds: [(&str, Family, Builder, Builder); 3] = [
        (
            "a permit",
            Family::Semaphore,
            |l, n| l.semaphore(n, 1),
            |l, n| l.semaphore(n, 1),
        ),
        (
            "a reader",
            Family::RwLock,
            |l, n| l.rwlock(n).write(),
            |l, n| l.rwlock(n).read(),
        ),
        (
            "a writer",
            Family::RwLock,
            |l, n| l.rwlock(n).read(),
            |l, n| l.rwlock(n).write(),
        ),
    ];
    let waited = Duration::from_millis(300);
    for (what, family, hold, wait) in kinds {
        let name = unique_name("kinds_timeout_exit");
        let held = hold(&holder, &name).acquire().await.expect("acquire");
        let result = in_a_process(h, |locker| {
            let name = name.clone();
            async move { wait(&locker, &name).timeout(waited).acquire().await.map(drop) }
        })
        .await;
        assert!(matches!(result, Err(LockError::Timeout(_))), "{what}: {result:?}");
        gone_waiter_left_nothing(h, family, &name, what).await;
        held.release().await.expect("release");
        let free = match family {
            Family::Semaphore => next.semaphore(&name, 1),
            _ => next.rwlock(&name).write(),
        };
        let guard = free.try_acquire().await.expect("try_acquire");
        assert!(guard.is_some(), "{what}: the lock was not free after its holder let go");
    }
    let name = unique_name("kinds_timeout_exit_lead");
    let lead = holder
        .election(&name)
        .campaign("holder")
        .acquire()
        .await
        .expect("campaign");
    let result = in_a_process(h, |locker| {
        let name = name.clone();
        async move {
            let campaign = locker.election(&name).campaign("gone").timeout(waited);
            campaign.acquire().await.map(drop)
        }
    })
    .await;
    assert!(matches!(result, Err(LockError::Timeout(_))), "a candidate: {result:?}");
    gone_waiter_left_nothing(h, Family::Election, &name, "a candidate").await;
    lead.resign().await.expect("resign");
    let next_lead = next.election(&name).campaign("next").try_acquire().await.expect("try");
    assert!(
        next_lead.is_some(),
        "a candidate: the election was not free after its leader resigned"
    );
}

/// After a process whose waiter on `family`'s lock `name` timed out has exited, only the holder's
/// entry is left.
async fn gone_waiter_left_nothing(h: &impl Harness, family: Family, name: &str, what: &str) {
    let left = h.residue_in(family, &LockName::new(name).expect("name")).await;
    assert_eq!(
        left.len(),
        1,
        "{what}: a process that exited after a timeout left its entry: {left:?}"
    );
}

/// A process whose `try_acquire` was cut by its own short timeout (the server may have carried
/// the attempt out) and that exits right after the error leaves nothing: the lock is free at
/// once for another client, not held by the dead process's entry for a TTL. Timeouts of 1 to 4
/// milliseconds, so that some attempts are cut after their request was sent.
pub async fn try_cut_by_its_timeout_that_exits_leaves_nothing(h: &impl Harness) {
    let next = h.locker().await;
    for round in 0..12u64 {
        // A new lock each round: its first attempt has the most to send (a parent node, a
        // counter), so the short timeouts cut it more often.
        let name = unique_name("try_cut_exit");
        let lock_name = LockName::new(&name).unwrap();
        let millis = 1 + round % 4;
        let outcome = in_a_process(h, |locker| {
            let name = name.clone();
            async move {
                let attempt = locker
                    .lock(&name)
                    .timeout(Duration::from_millis(millis))
                    .try_acquire()
                    .await;
                match attempt {
                    // Answered in time: a process that got the lock releases it before it exits.
                    Ok(Some(guard)) => guard.release().await.map(|()| "acquired"),
                    Ok(None) => Ok("busy"),
                    Err(e) => Err(e),
                }
            }
        })
        .await;
        tracing::debug!(millis, ?outcome, "try_acquire cut by its own timeout");
        assert!(
            matches!(outcome, Ok("acquired") | Err(LockError::Unavailable { .. })),
            "expected the lock or Unavailable with a timeout of {millis} ms, got {outcome:?}"
        );
        let guard = next.lock(&name).try_acquire().await.expect("try_acquire");
        assert!(
            guard.is_some(),
            "after a try_acquire cut by its {millis} ms timeout and an exit, the lock is not free: {:?}",
            h.residue(&lock_name).await
        );
        guard.unwrap().release().await.expect("release");
    }
}

/// A process that drops a guard through an early `?`, holds another, has a request waiting, and
/// calls [`Locker::shutdown`] before it exits leaves nothing held: the other clients get both
/// locks at once (within a round trip, not a TTL); the guard still held was told it is lost
/// ([`LostReason::Shutdown`]); the waiting request and every later one end with
/// [`LockError::Closed`].
pub async fn shutdown_releases_everything(h: &impl Harness) {
    let (dropped, kept) = (unique_name("shutdown_dropped"), unique_name("shutdown_kept"));
    let (dropped_name, kept_name) = (LockName::new(&dropped).unwrap(), LockName::new(&kept).unwrap());
    let other = h.locker().await;
    let (lost, waited, later) = in_a_process(h, |locker| {
        let (dropped, kept) = (dropped.clone(), kept.clone());
        async move {
            let early: Result<(), LockError> = async {
                let _guard = locker.lock(&dropped).acquire().await?;
                Err(LockError::Protocol("an early `?` drops the guard".into()))
            }
            .await;
            assert!(early.is_err());
            let held = locker.lock(&kept).acquire().await.expect("acquire");
            let lost = held.lost();
            let waiting = tokio::spawn({
                let (locker, kept) = (locker.clone(), kept.clone());
                async move { locker.lock(&kept).acquire().await.map(drop) }
            });
            tokio::time::sleep(Duration::from_millis(200)).await; // the waiter is queued
            locker.shutdown().await.expect("shutdown");
            let lost = tokio::time::timeout(Duration::from_secs(1), lost).await.ok();
            let waited = tokio::time::timeout(Duration::from_secs(1), waiting)
                .await
                .map(|joined| joined.expect("waiter task"));
            let later = locker.lock(&dropped).try_acquire().await.map(|g| g.is_some());
            drop(held); // after shutdown: nothing more to do
            (lost, waited, later)
        }
    })
    .await;
    assert_eq!(
        lost,
        Some(LostReason::Shutdown),
        "the guard held at shutdown was not told"
    );
    assert!(
        matches!(waited, Ok(Err(LockError::Closed))),
        "a request waiting at shutdown must end with Closed: {waited:?}"
    );
    assert!(
        matches!(later, Err(LockError::Closed)),
        "a request after shutdown: {later:?}"
    );
    for (name, lock_name) in [(&dropped, &dropped_name), (&kept, &kept_name)] {
        let guard = other.lock(name).try_acquire().await.expect("try_acquire");
        assert!(
            guard.is_some(),
            "{name} is still held after its process shut down and exited: {:?}",
            h.residue(lock_name).await
        );
        guard.unwrap().release().await.expect("release");
    }
}

/// A locker shut down while one of its acquires waits in a queue, in a process that exits as soon
/// as `shutdown` returns, without awaiting the waiter's task: `shutdown` must not return before
/// the waiter has left its queue. Then, when the holder releases, the lock goes to the next
/// client at once, not to the gone waiter (which would hold it, unreleased, for its TTL).
pub async fn shutdown_with_a_waiter_queued_leaves_nothing(h: &impl Harness) {
    let name = unique_name("shutdown_waiting");
    let other = h.locker().await;
    let held = other.lock(&name).acquire().await.expect("acquire");
    in_a_process_on(h, &mut tokio::runtime::Builder::new_current_thread(), |locker| {
        let name = name.clone();
        async move {
            let _waiting = tokio::spawn({
                let locker = locker.clone();
                async move { locker.lock(&name).acquire().await.map(drop) }
            });
            tokio::time::sleep(Duration::from_millis(200)).await; // the waiter is queued
            locker.shutdown().await.expect("shutdown");
            // `exit` now: the waiter's task never runs again.
        }
    })
    .await;
    held.release().await.expect("release");
    taken_within(
        h,
        &other,
        &name,
        "the lock its holder released, with the shut-down waiter gone",
    )
    .await;
}

/// Reads on a locker that was shut down (`inspect`, `list`) answer `Closed`, as new requests do:
/// some backends answered them from a session that was over, others failed as unreachable.
pub async fn reads_after_shutdown_end_with_closed(h: &impl Harness) {
    let locker = h.locker().await;
    locker.shutdown().await.expect("shutdown");
    let inspected = locker.inspect(&unique_name("closed_inspect")).await.map(|_| ());
    assert!(
        matches!(inspected, Err(LockError::Closed)),
        "inspect after shutdown: {inspected:?}"
    );
    let listed = locker.list("closed_list").await.map(|_| ());
    assert!(
        matches!(listed, Err(LockError::Closed)),
        "list after shutdown: {listed:?}"
    );
}

/// A call that its caller polled once and then left pending unpolled (a `select!` whose other
/// branch's body runs long, a `buffer_unordered` stream whose consumer is busy with an item)
/// holds up none of its locker's other calls: while it waits, a lock held on the same locker
/// keeps its lease (its renewals go on), and a try on another lock answers; polled again, it
/// ends as it would have: an acquire or a try whose lease ran out meanwhile takes the lock again
/// (another may have taken it), and answers a lock it holds. Checked for an acquire, a release
/// and a try.
pub async fn a_stalled_call_holds_up_no_other_call(h: &impl Harness) {
    let (name, other, kept) = (
        unique_name("stalled"),
        unique_name("stalled_other"),
        unique_name("stalled_kept"),
    );
    let a = h.locker().await;
    let ttl = h.short_ttl();
    // The lock is known to the server: the stalled acquire sends what a cycle's acquire sends.
    a.lock(&name)
        .acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    let held = a.lock(&kept).ttl(ttl).acquire().await.expect("acquire the kept lock");
    let mut acquire = Box::pin(a.lock(&name).ttl(ttl).acquire());
    let guard = match poll_first(acquire.as_mut()).await {
        Poll::Ready(out) => out,
        Poll::Pending => {
            others_go_on(&a, &held, &other, ttl, "an acquire").await;
            within(patience(h), "the stalled acquire, polled again", acquire).await
        }
    };
    let guard = guard.expect("acquire");
    assert!(guard.is_held(), "the stalled acquire's lock: {:?}", guard.lost_reason());
    let mut release = Box::pin(guard.release());
    let released = match poll_first(release.as_mut()).await {
        Poll::Ready(out) => out,
        Poll::Pending => {
            others_go_on(&a, &held, &other, ttl, "a release").await;
            within(patience(h), "the stalled release, polled again", release).await
        }
    };
    released.expect("release");
    let b = h.locker().await;
    let freed = b.lock(&name).try_acquire().await.expect("try after the release");
    freed
        .expect("the lock is free after the stalled release")
        .release()
        .await
        .expect("release");
    // A try left unpolled past its lease's TTL, polled again, answers a lock it holds.
    let mut attempt = Box::pin(a.lock(&name).ttl(ttl).try_acquire());
    let tried = match poll_first(attempt.as_mut()).await {
        Poll::Ready(out) => out,
        Poll::Pending => {
            tokio::time::sleep(ttl * 2).await;
            within(patience(h), "the stalled try, polled again", attempt).await
        }
    };
    let tried = tried.expect("try").expect("the lock is free");
    assert!(tried.is_held(), "the stalled try's lock: {:?}", tried.lost_reason());
    tried.release().await.expect("release");
    assert!(held.is_held(), "the kept lock: {:?}", held.lost_reason());
    held.release().await.expect("release the kept lock");
}

/// Polls `fut` once: its output, if it ended.
async fn poll_first<F: Future + Unpin>(mut fut: F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut fut).poll(cx))).await
}

/// For four TTLs while a call of `locker`'s (`stalled`, for the messages) is left unpolled:
/// `held` keeps its lease, and a try on lock `other` answers within two TTLs and a second.
async fn others_go_on(locker: &Locker, held: &crate::LockGuard, other: &str, ttl: Duration, stalled: &str) {
    let until = tokio::time::Instant::now() + ttl * 4;
    let bound = ttl * 2 + Duration::from_secs(1);
    while tokio::time::Instant::now() < until {
        let what = format!("a try on another lock of the locker while {stalled} is left unpolled");
        let got = within(bound, &what, locker.lock(other).try_acquire())
            .await
            .expect("try");
        got.expect("the other lock is free").release().await.expect("release");
        assert!(
            held.is_held(),
            "a lock of the locker while {stalled} is left unpolled: {:?}",
            held.lost_reason()
        );
        tokio::time::sleep(ttl / 4).await;
    }
}
