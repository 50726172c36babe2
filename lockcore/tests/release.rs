//! `LockGuard::release` runs in the caller's task: awaited to its end it spawns nothing (no task
//! to schedule, no thread to wake), and dropped mid-flight it still releases (the conformance
//! suite's `release_cancelled_mid_flight_releases`, run on every backend).

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use locksmith_core::{Locker, MemoryBackend};

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
