//! A release that failed for want of an answer (the server down, partitioned away, or too slow)
//! is tried again in the background, so that the lock is free as soon as the server answers
//! again, not only once the rest of its TTL has run out. [`crate::LockGuard::release`] promises
//! it, a dropped guard does it, and so does the watchdog's release of a lease it ended (after
//! `max_hold`, or a renewal that failed); this module does it once, for every backend (the
//! shared conformance suite checks it: `conformance::deadlines`).
//!
//! The tries end at the first answer (released, or not held any more), once the lease has surely
//! ended (a TTL after the first try began: nothing has renewed it since), or when the locker is
//! shut down (the try in flight is then the last, and `Locker::shutdown` waits for it).

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
    /// When the lease has surely ended on the server: a TTL after the first try began.
    until: Instant,
    closed: watch::Receiver<bool>,
}

impl Retry {
    /// For the release of `lease` on `backend` whose first try began at `began`; `closed`: the
    /// locker's shutdown.
    fn new(backend: Arc<dyn LockBackend>, lease: Lease, began: Instant, closed: watch::Receiver<bool>) -> Retry {
        let until = began
            .checked_add(lease.ttl)
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
