//! The clean-up of an acquire given up on reaches the server even when the server could not be
//! reached at the moment the acquire ended.

mod common;

use std::time::Duration;

use locksmith_core::conformance::proxy::{Mode, Proxy};
use locksmith_core::conformance::unique_name;
use locksmith_core::LockError;

/// A waiter handed the lock while its connection was frozen, whose connection then broke: its
/// `LEAVE` (inline, then in the background) cannot get through. Once the connection is
/// back, the `LEAVE` must be sent again and free the lock, not leave it held by the cancelled
/// waiter's token for its TTL (14 s here; the test servers' restart_delay is 15 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_whose_leave_failed_leaves_once_the_server_answers() {
    let direct = common::redis_url();
    let proxy = Proxy::start(&common::redis_upstream()).await;
    let through = format!("redis://{}?response_timeout=300ms", proxy.addr());
    let name = unique_name("leave_retried");
    let (holder, other) = (common::locker(&direct).await, common::locker(&direct).await);
    let waiter = common::locker(&through).await;

    let held = holder.lock(&name).acquire().await.expect("acquire");
    let waiting = tokio::spawn({
        let (waiter, name) = (waiter.clone(), name.clone());
        async move {
            waiter
                .lock(&name)
                .ttl(Duration::from_secs(14))
                .timeout(Duration::from_millis(1500))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await; // queued behind the holder
    proxy.set(Mode::FREEZE);
    held.release().await.expect("release"); // hands the lock to the frozen waiter for 14 s
                                            // Cut, not frozen: frozen bytes would reach the server once thawed, the LEAVE among them.
    proxy.set(Mode::Cut);
    let result = waiting.await.expect("the waiter's task");
    assert!(
        matches!(result, Err(LockError::Unavailable { .. } | LockError::Timeout(_))),
        "the waiter never heard of its grant: {result:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await; // the background LEAVE fails too
    proxy.set(Mode::Forward);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(guard) = other.lock(&name).try_acquire().await.expect("try") {
            guard.release().await.expect("release");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lock is still held by the cancelled waiter's grant 5 s after the server came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    waiter.shutdown().await.expect("shutdown");
}
