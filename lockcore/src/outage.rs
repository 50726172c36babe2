//! [`Outage`]: how a waiting `acquire` rides out a backend that stops answering, for backends to
//! share.
//!
//! A waiter that meets [`LockError::Unavailable`] does not fail at once: it retries with backoff
//! and keeps waiting, until its deadline, or — without a deadline — until the outage has lasted
//! longer than the backend's budget (about as long as its queue entry survives without renewal).
//! At the deadline it says which it was: the lock was held by someone else the whole time
//! ([`LockError::Timeout`]), or the backend was not answering ([`LockError::Unavailable`]).

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{LockError, Result};

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The retry state of one waiting `acquire`.
#[derive(Debug)]
pub struct Outage {
    deadline: Option<Instant>,
    budget: Duration,
    failing_since: Option<Instant>,
    last_error: Option<String>,
    backoff: Duration,
}

impl Outage {
    /// An acquire that waits until `deadline` (without one: rides out outages of up to `budget`).
    pub fn new(deadline: Option<Instant>, budget: Duration) -> Self {
        Outage {
            deadline,
            budget,
            failing_since: None,
            last_error: None,
            backoff: FIRST_BACKOFF,
        }
    }

    /// A request succeeded: the outage, if any, is over.
    pub fn succeeded(&mut self) {
        self.failing_since = None;
        self.last_error = None;
        self.backoff = FIRST_BACKOFF;
    }

    /// The caller's deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the backend is failing right now (the last request did).
    pub fn is_failing(&self) -> bool {
        self.failing_since.is_some()
    }

    /// A request failed with `e`. Returns `Ok` (after a backoff pause) to try again, or an error:
    /// `e` itself when it is not [`LockError::Unavailable`] or the outage outlasted the budget
    /// (no deadline), [`Outage::at_deadline`] when the deadline came during the pause.
    ///
    /// # Errors
    ///
    /// The error to end the waiting call with: `e` itself when it is not
    /// [`LockError::Unavailable`], or when the outage outlasted the budget (no deadline);
    /// [`Outage::at_deadline`]'s ([`LockError::Unavailable`]) when the deadline came during the
    /// pause.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping it only cuts the pause short (the backoff then stays where it was).
    ///
    ///
    /// # Examples
    ///
    /// A waiter's retry loop against a server that stays down:
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use locksmith::{driver::Outage, LockError};
    /// let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
    /// let mut outage = Outage::new(Some(deadline), Duration::from_secs(30));
    /// let ended = loop {
    ///     let down = LockError::Unavailable { message: "connection refused".into(), source: None };
    ///     if let Err(e) = outage.failed(down).await {
    ///         break e; // the deadline came while the server was down
    ///     }
    /// };
    /// assert!(matches!(ended, LockError::Unavailable { .. }) && outage.is_failing());
    /// # }
    /// ```
    pub async fn failed(&mut self, e: LockError) -> Result<()> {
        if !matches!(e, LockError::Unavailable { .. }) {
            return Err(e);
        }
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        self.last_error = Some(e.to_string());
        let wake = Instant::now() + self.backoff;
        match self.deadline {
            None if since.elapsed() >= self.budget => return Err(e),
            Some(deadline) if deadline <= wake => {
                tokio::time::sleep_until(deadline).await;
                return Err(self.at_deadline());
            }
            _ => {}
        }
        tracing::debug!(error = %e, backoff = ?self.backoff, "backend unavailable; retrying");
        tokio::time::sleep_until(wake).await;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Ok(())
    }

    /// The error of an acquire whose deadline passed: [`LockError::Timeout`] when the backend
    /// answered (the lock was held), [`LockError::Unavailable`] when it was failing.
    pub fn at_deadline(&self) -> LockError {
        match (&self.failing_since, &self.last_error) {
            (Some(since), Some(e)) => LockError::Unavailable {
                message: format!("no answer at the deadline (failing for {:?}): {e}", since.elapsed()),
                source: None,
            },
            _ => LockError::Timeout(Duration::ZERO),
        }
    }
}

/// Sleeps until `deadline`, or for ever without one: the deadline branch of a waiter's
/// `select!`.
///
/// # Cancel safety
///
/// Cancel-safe: a sleep only; dropped (another branch of the `select!` won), nothing changes.
pub async fn sleep_until_deadline(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
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
    async fn without_deadline_retries_within_the_budget_only() {
        let mut o = Outage::new(None, Duration::from_secs(2));
        assert!(matches!(
            o.failed(LockError::Protocol("x".into())).await,
            Err(LockError::Protocol(_))
        ));
        let start = Instant::now();
        while o.failed(unavailable()).await.is_ok() {}
        assert!(start.elapsed() >= Duration::from_secs(2));
        o.succeeded();
        assert!(o.failed(unavailable()).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_deadline_retries_until_it_and_says_why() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut o = Outage::new(Some(deadline), Duration::from_millis(1));
        assert!(matches!(o.at_deadline(), LockError::Timeout(_)));
        let result = loop {
            if let Err(e) = o.failed(unavailable()).await {
                break e;
            }
        };
        assert_eq!(Instant::now(), deadline, "ends exactly at the deadline");
        assert!(matches!(result, LockError::Unavailable { .. }), "{result:?}");
        o.succeeded();
        assert!(matches!(o.at_deadline(), LockError::Timeout(_)));
    }
}
