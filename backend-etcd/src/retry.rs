//! Riding out short outages (a leader election, a member going down) inside `acquire`.
//!
//! An `acquire` that meets [`LockError::Unavailable`] retries with backoff instead of failing at
//! once, as long as the outage has not lasted longer than its budget (the session TTL plus the
//! request timeout: beyond that the session lease, and the waiter's key with it, is probably
//! gone). A waiter keeps its queue key while it retries, so it keeps its place. The caller's
//! timeout still applies: the `Locker` drops the future at the deadline.

use std::time::Duration;

use lockcore::{LockError, Result};
use tokio::time::Instant;

/// Backoff state of one `acquire`.
pub(crate) struct Retry {
    budget: Duration,
    failing_since: Option<Instant>,
    backoff: Duration,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl Retry {
    pub fn new(budget: Duration) -> Self {
        Retry {
            budget,
            failing_since: None,
            backoff: FIRST_BACKOFF,
        }
    }

    /// A request succeeded: the outage, if any, is over.
    pub fn succeeded(&mut self) {
        self.failing_since = None;
        self.backoff = FIRST_BACKOFF;
    }

    /// A request failed with `e`: sleeps and returns `Ok` to try again, or returns the error when
    /// it is not transient or the outage outlasted the budget.
    pub async fn failed(&mut self, e: LockError) -> Result<()> {
        if !matches!(e, LockError::Unavailable { .. }) {
            return Err(e);
        }
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.budget {
            return Err(e);
        }
        tracing::debug!(error = %e, backoff = ?self.backoff, "etcd unavailable; retrying");
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable() -> LockError {
        LockError::Unavailable {
            message: "down".into(),
            source: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_within_the_budget_only() {
        let mut r = Retry::new(Duration::from_secs(2));
        assert!(matches!(
            r.failed(LockError::Protocol("x".into())).await,
            Err(LockError::Protocol(_))
        ));
        let start = Instant::now();
        while r.failed(unavailable()).await.is_ok() {}
        assert!(start.elapsed() >= Duration::from_secs(2));
        r.succeeded();
        assert!(r.failed(unavailable()).await.is_ok());
    }
}
