//! `LockGuard::release` runs in the caller's task: awaited to its end it spawns nothing (no task
//! to schedule, no thread to wake), and dropped mid-flight it still releases (the conformance
//! suite's `release_cancelled_mid_flight_releases`, run on every backend).

mod support;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use locksmith_core::{LockError, Locker, MemoryBackend};

/// On a one-thread runtime nothing runs between two polls of the caller's future unless the caller
/// yields: a release done in a task of its own cannot be finished on the first poll.
#[tokio::test(flavor = "current_thread")]
async fn a_release_on_the_memory_backend_ends_on_its_first_poll() {
    let store = MemoryBackend::new();
    let locker = Locker::new(store.clone());
    let guard = locker.lock("release-inline").acquire().await.expect("acquire");
    let mut release = pin!(guard.release());
    let first = release.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(
        matches!(first, Poll::Ready(Ok(()))),
        "release() did not end on its first poll: it handed the work to another task"
    );
    let again = locker.lock("release-inline").try_acquire().await.expect("try_acquire");
    assert!(again.is_some(), "the lock is free after the release");
    drop(again);
    locker.shutdown().await.expect("shutdown");
}

/// Bug: a release that got no answer is tried again in the background until the backend answers,
/// the lease ends or the locker is shut down; a locker whose last handle was dropped (the guard
/// held it: `connect(url).await?.lock(..)`) counted as shut down, and the retry stopped before
/// its first try: the lock stayed held for its whole TTL although the backend answered again.
#[tokio::test]
async fn a_release_without_an_answer_is_tried_again_after_its_locker_is_dropped() {
    let store = MemoryBackend::new();
    let flaky = Arc::new(support::FaultyRelease::first_unanswered(store.clone()));
    let guard = Locker::from_arc(flaky)
        .lock("dropped-locker")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    let released = guard.release().await;
    assert!(matches!(released, Err(LockError::Unavailable { .. })), "{released:?}");
    let other = Locker::new(store);
    tokio::time::timeout(Duration::from_secs(5), async {
        while other.lock("dropped-locker").try_acquire().await.unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("still held 5 s after a release that got no answer (TTL 30 s)");
}

/// A release cut off mid-flight (a timeout around it) still releases, and `shutdown` waits for
/// the rest of it. On the memory backend a release ends on its first poll, so the conformance
/// suite's `release_cancelled_mid_flight_releases` cuts nothing off there: this backend's release
/// takes a while, as a server's does.
#[tokio::test]
async fn a_release_cut_off_mid_flight_still_releases_and_shutdown_waits_for_it() {
    let store = MemoryBackend::new();
    let slow = Arc::new(support::FaultyRelease::slow(store.clone(), 200));
    let locker = Locker::from_arc(slow);
    let guard = locker
        .lock("cut-off")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    let cut = tokio::time::timeout(Duration::from_millis(20), guard.release()).await;
    assert!(cut.is_err(), "the release was not cut off: {cut:?}");
    locker.shutdown().await.expect("shutdown");
    let other = Locker::new(store);
    let again = other.lock("cut-off").try_acquire().await.expect("try_acquire");
    assert!(
        again.is_some(),
        "still held after shutdown returned: the rest of the release was lost"
    );
}

/// `release()` after `lost()` fired answers `NotHeld`, as its docs say, whichever of it and the
/// watchdog's own release of the lost lease reaches the backend first (here the first of them
/// gets no answer). (Before, it answered `Ok(())` when it came second, or `Unavailable`: a caller
/// could read the first as "held to the end".)
#[tokio::test(flavor = "current_thread")]
async fn a_release_after_lost_fired_answers_not_held() {
    let store = MemoryBackend::new();
    let locker = Locker::from_arc(Arc::new(support::FaultyRelease::first_unanswered(store.clone())));
    let guard = (locker.lock("capped"))
        .ttl(Duration::from_secs(30))
        .max_hold(Duration::from_millis(100))
        .acquire()
        .await
        .expect("acquire");
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fired");
    assert_eq!(reason, locksmith_core::LostReason::MaxHoldReached);
    let released = guard.release().await;
    assert!(matches!(released, Err(LockError::NotHeld { .. })), "{released:?}");
    let other = Locker::new(store);
    tokio::time::timeout(Duration::from_secs(5), async {
        while other.lock("capped").try_acquire().await.unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the lost lock was not released");
}

/// Runs `future` to its end on this thread, with no tokio runtime around it (as
/// `futures::executor::block_on` or another executor would).
fn block_on_without_runtime<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
            return out;
        }
        std::thread::park();
    }
}

/// A guard taken on a runtime and released, or dropped, where no runtime runs (a plain thread,
/// another executor, a synchronous `Drop`) releases the lock on the runtime it was taken on.
/// (Before, `release()` answered `Protocol("release needs a tokio runtime")` and the drop logged
/// a warning: either way the lock stayed held for its whole TTL.)
#[test]
fn a_guard_released_or_dropped_outside_any_runtime_releases_the_lock() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let locker = Locker::new(MemoryBackend::new());
    let take = |name: &'static str| {
        let lock = locker.lock(name).ttl(Duration::from_secs(30));
        runtime.block_on(lock.acquire()).expect("acquire")
    };
    let free = |name: &'static str| {
        runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), async {
                while locker.lock(name).try_acquire().await.unwrap().is_none() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .is_ok()
        })
    };
    let released = block_on_without_runtime(take("released").release());
    assert!(released.is_ok(), "{released:?}");
    assert!(free("released"), "still held after release() outside a runtime");
    drop(take("dropped"));
    assert!(
        free("dropped"),
        "still held 5 s after the guard was dropped outside a runtime"
    );
}
