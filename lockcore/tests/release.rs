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
    let flaky = Arc::new(support::FirstReleaseUnanswered {
        inner: store.clone(),
        fail_next: true.into(),
    });
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
