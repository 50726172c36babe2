//! A release that failed for want of an answer (the server down, partitioned away, or too slow)
//! is tried again in the background, so that the lock is free as soon as the server answers
//! again, not only once the rest of its TTL has run out. [`crate::LockGuard::release`] promises
//! it, a dropped guard does it, and so does the watchdog's release of a lease it ended (after
//! `max_hold`, or a renewal that failed); this module does it once, for every backend (the
//! shared conformance suite checks it: `conformance::deadlines`).
//!
//! The tries end at the first answer (released, or not held any more), once the lease has surely
//! ended, or when the locker is shut down (the try in flight is then the last, and
//! `Locker::shutdown` waits for it). The lease has surely ended a TTL and a request timeout after
//! the first try began: nothing renews it once the release has begun, but a renewal sent just
//! before may reach the server up to a request timeout later, and the lease then runs a TTL from
//! there.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{bounded_release, LockBackend};
use crate::error::{LockError, Result};
use crate::lease::Lease;

/// The pause before the first try again; it doubles after each, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Whether a release's outcome calls for another try: the backend did not answer.
fn unanswered(outcome: &Result<()>) -> bool {
    matches!(outcome, Err(LockError::Unavailable { .. }))
}

/// One try of the release of `lease`, bounded by the backend's request timeout (`what` names it
/// in the error): its outcome, and the tries again it calls for if the backend did not answer
/// (run them with [`Retry::run`]); `closed`: the locker's shutdown.
pub(crate) async fn release_once(
    backend: &Arc<dyn LockBackend>,
    lease: &Lease,
    what: &str,
    closed: watch::Receiver<bool>,
) -> (Result<()>, Option<Retry>) {
    let began = Instant::now();
    let outcome = bounded_release(backend.as_ref(), what, lease).await;
    let retry = unanswered(&outcome).then(|| Retry::new(backend.clone(), lease.clone(), began, closed));
    (outcome, retry)
}

/// The tries again of a release that got no answer.
pub(crate) struct Retry {
    backend: Arc<dyn LockBackend>,
    lease: Lease,
    /// When the lease has surely ended on the server: a TTL and a request timeout after the first
    /// try began (see the module docs).
    until: Instant,
    closed: watch::Receiver<bool>,
}

impl Retry {
    /// For the release of `lease` on `backend` whose first try began at `began`; `closed`: the
    /// locker's shutdown.
    fn new(backend: Arc<dyn LockBackend>, lease: Lease, began: Instant, closed: watch::Receiver<bool>) -> Retry {
        let until = began
            .checked_add(lease.ttl.saturating_add(backend.request_timeout()))
            .unwrap_or_else(|| began + Duration::from_secs(86_400));
        Retry {
            backend,
            lease,
            until,
            closed,
        }
    }

    /// Tries the release again, with backoff, until the backend answers, the lease has surely
    /// ended, or the locker is shut down; logs how it ended.
    pub(crate) async fn run(mut self) {
        let mut pause = FIRST_PAUSE;
        let mut tries = 0u32;
        let answer = loop {
            if Instant::now() + pause >= self.until {
                break None;
            }
            let shut_down = tokio::select! {
                () = tokio::time::sleep(pause) => false,
                () = until_shut_down(&mut self.closed) => true,
            };
            if shut_down {
                break None;
            }
            let outcome = bounded_release(self.backend.as_ref(), "releasing the lock again", &self.lease).await;
            tries += 1;
            if !unanswered(&outcome) {
                break Some(outcome);
            }
            pause = (pause * 2).min(MAX_PAUSE);
        };
        let lock = &self.lease.name;
        match answer {
            Some(Ok(())) => tracing::info!(%lock, tries, "released, after a release the backend did not answer"),
            Some(Err(e)) => tracing::debug!(%lock, tries, error = %e, "released again: not held any more"),
            None => tracing::debug!(%lock, tries, "no answer to the release; the lock expires with its TTL"),
        }
    }
}

/// Resolves when the locker is shut down. A locker dropped without `shutdown` (its last handle
/// gone, as when a guard held the only one) is not shut down: the release goes on being tried
/// (the retry holds the backend), as the one that got no answer still holds the lock.
async fn until_shut_down(closed: &mut watch::Receiver<bool>) {
    if closed.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LockInfo;
    use crate::lease::LockRequest;
    use crate::memory::MemoryBackend;
    use crate::name::LockName;
    use async_trait::async_trait;

    /// The memory backend a request timeout away, whose releases get no answer until `answers_from`.
    #[derive(Debug)]
    struct Unanswered {
        store: MemoryBackend,
        answers_from: Instant,
    }

    #[async_trait]
    impl LockBackend for Unanswered {
        fn kind(&self) -> &'static str {
            "mem"
        }
        async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
            self.store.try_acquire(req).await
        }
        async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
            self.store.acquire(req, deadline).await
        }
        async fn release(&self, lease: &Lease) -> Result<()> {
            if Instant::now() < self.answers_from {
                return Err(LockError::Unavailable {
                    message: "no answer (test)".into(),
                    source: None,
                });
            }
            self.store.release(lease).await
        }
        async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
            self.store.renew_many(leases).await
        }
        async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
            self.store.inspect(name).await
        }
        fn request_timeout(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    /// Bug: the tries of a release that got no answer ended a TTL after it began. A renewal sent
    /// just before the release, reaching the server up to a request timeout later, keeps the lease
    /// past that: the server answered again within the lease, and nobody released it.
    #[tokio::test(start_paused = true)]
    async fn the_tries_outlast_a_renewal_that_reached_the_server_after_the_release_began() {
        let store = MemoryBackend::new();
        let name = LockName::new("late-renewal").unwrap();
        let lease = store
            .try_acquire(&LockRequest::mutex(name.clone(), Duration::from_secs(2)))
            .await
            .unwrap()
            .expect("the lock is free");
        let began = Instant::now();
        // The renewal sent just before the release began reaches the server 0.9 s later (within
        // the request timeout): the lease then ends at 2.9 s.
        let late_renewal = tokio::spawn({
            let (store, lease) = (store.clone(), lease.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(900)).await;
                store.renew(&lease).await
            }
        });
        let backend: Arc<dyn LockBackend> = Arc::new(Unanswered {
            store: store.clone(),
            answers_from: began + Duration::from_millis(2_100),
        });
        let (_shut, closed) = watch::channel(false);
        let (outcome, retry) = release_once(&backend, &lease, "releasing (test)", closed).await;
        assert!(matches!(outcome, Err(LockError::Unavailable { .. })), "{outcome:?}");
        retry.expect("an unanswered release is tried again").run().await;
        late_renewal.await.unwrap().expect("the late renewal");
        tokio::time::sleep_until(began + Duration::from_millis(2_700)).await;
        let info = store.inspect(&name).await.unwrap();
        assert_eq!(
            info.holder, None,
            "held at 2.7 s: the server answered from 2.1 s on, and the tries had ended"
        );
    }
}
