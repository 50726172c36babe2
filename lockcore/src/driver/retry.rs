//! Trying a step again after a failure that can heal (an outage, a server electing a leader),
//! with a delay that doubles up to a cap: the one retry policy of every backend's clean-up
//! (a cancelled acquire's queue entry removed again, a key deleted again) and of the requests
//! sent again when they never reached the server.
//!
//! A backend states its policy as a [`Backoff`] (first delay, cap, how long to keep trying,
//! whether the first try is itself a retry of one made elsewhere) and what stops it as the
//! `heals` predicate of [`retry`]: an error for which it returns `false` ends the retries at once
//! (`Closed`: the locker shut down and removed everything itself; a lease the session no longer
//! owns). Loops that never end (an observer following an election, a stream opened again) take
//! only the delays, from [`Backoff::delays`].

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// The delays between tries: `first`, then doubling up to `cap`; optionally a bound past which
/// no try is started ([`Backoff::give_up_after`]).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use locksmith_core::driver::retry::Backoff;
///
/// let backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(300));
/// let delays: Vec<u64> = backoff.delays().take(5).map(|d| d.as_millis() as u64).collect();
/// assert_eq!(delays, [50, 100, 200, 300, 300]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    give_up_after: Option<Duration>,
    pause_first: bool,
}

impl Backoff {
    /// Delays of `first`, then twice the last one, at most `cap`; tried for ever, the first try
    /// at once.
    pub const fn new(first: Duration, cap: Duration) -> Self {
        Backoff {
            first,
            cap,
            give_up_after: None,
            pause_first: false,
        }
    }

    /// Gives up once the next try would start `bound` or later after [`retry`] began: a try is
    /// made only if its delay ends before then.
    #[must_use]
    pub const fn give_up_after(mut self, bound: Duration) -> Self {
        self.give_up_after = Some(bound);
        self
    }

    /// Waits the first delay before the first try too: for a retry of a try already made
    /// elsewhere (a clean-up's first try, which its call waited for).
    #[must_use]
    pub const fn pause_first(mut self) -> Self {
        self.pause_first = true;
        self
    }

    /// The delays, one per failed try, endless.
    pub fn delays(&self) -> Delays {
        Delays {
            first: self.first,
            next: self.first,
            cap: self.cap,
        }
    }
}

/// The delays of a [`Backoff`]: `first`, then doubling up to the cap; [`Delays::reset`] starts
/// again from `first` (after a success, in a loop that never ends).
#[derive(Clone, Debug)]
pub struct Delays {
    first: Duration,
    next: Duration,
    cap: Duration,
}

impl Delays {
    /// The next delay is the first again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }

    /// The delay after the next failure (the iterator's next item: there is always one).
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = delay.saturating_mul(2).min(self.cap);
        delay
    }
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

/// Why [`retry`] stopped without a success.
#[derive(Debug, thiserror::Error)]
pub enum RetryError<E> {
    /// A step failed with an error `heals` said cannot heal.
    #[error("failed after {tries} tries: {error}")]
    Permanent {
        /// The error of the last step.
        error: E,
        /// The tries made, the last one included.
        tries: u32,
    },
    /// The next try would have started past the [`Backoff::give_up_after`] bound.
    #[error("gave up after {tries} tries")]
    GaveUp {
        /// The error of the last step, if a step ran.
        last: Option<E>,
        /// The tries made.
        tries: u32,
    },
}

/// Runs `step` (given the number of this try, from 1) until it succeeds, again after each delay
/// of `backoff` while its error `heals`. `heals` decides stop or again (and is where a caller
/// logs a failure it tries again).
///
/// # Errors
///
/// [`RetryError::Permanent`] with the error of a step for which `heals` answered `false`;
/// [`RetryError::GaveUp`] when the next try would start past [`Backoff::give_up_after`].
///
/// # Cancel safety
///
/// Dropped between tries, nothing is left half done; dropped during a try, the step's own
/// future is dropped there, so `retry` is as cancel-safe as `step`. Clean-up that must end
/// anyway runs it inside a task of [`crate::driver::cleanup::spawn`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use locksmith_core::driver::retry::{retry, Backoff, RetryError};
/// use locksmith_core::LockError;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(4));
/// // Unavailable twice, then an answer.
/// let answered = retry(
///     backoff,
///     |tries| async move {
///         match tries {
///         1 | 2 => Err(LockError::Unavailable { message: "down".into(), source: None }),
///             _ => Ok(tries),
///         }
///     },
///     |e| !matches!(e, LockError::Closed),
/// )
/// .await;
/// assert_eq!(answered.unwrap(), 3);
///
/// // `Closed` cannot heal: one try.
/// let closed = retry(backoff, |_| async { Err::<(), _>(LockError::Closed) }, |e| !matches!(e, LockError::Closed)).await;
/// assert!(matches!(closed, Err(RetryError::Permanent { tries: 1, .. })));
/// # }
/// ```
pub async fn retry<T, E, S, F, H>(backoff: Backoff, mut step: S, mut heals: H) -> Result<T, RetryError<E>>
where
    S: FnMut(u32) -> F,
    F: Future<Output = Result<T, E>>,
    H: FnMut(&E) -> bool,
{
    let give_up = backoff.give_up_after.map(|bound| Instant::now() + bound);
    let mut delays = backoff.delays();
    let mut pause = backoff.pause_first;
    let mut last = None;
    let mut tries = 0u32;
    loop {
        if pause {
            let delay = delays.next_delay();
            if give_up.is_some_and(|at| Instant::now() + delay >= at) {
                return Err(RetryError::GaveUp { last, tries });
            }
            tokio::time::sleep(delay).await;
        }
        tries += 1;
        match step(tries).await {
            Ok(out) => return Ok(out),
            Err(e) if heals(&e) => {
                last = Some(e);
                pause = true;
            }
            Err(error) => return Err(RetryError::Permanent { error, tries }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn delays_double_up_to_the_cap_and_reset() {
        let mut delays = Backoff::new(ms(50), ms(1000)).delays();
        let seen: Vec<_> = delays.by_ref().take(7).collect();
        assert_eq!(seen, [ms(50), ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]);
        delays.reset();
        assert_eq!(delays.next(), Some(ms(50)));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_tries_again_while_it_heals_with_the_delays_between() {
        let start = Instant::now();
        let mut at = Vec::new();
        let out = retry(
            Backoff::new(ms(50), ms(100)),
            |tries| {
                at.push(start.elapsed());
                async move {
                    if tries < 4 {
                        Err("down")
                    } else {
                        Ok(tries)
                    }
                }
            },
            |_| true,
        )
        .await;
        assert_eq!(out.unwrap(), 4);
        assert_eq!(at, [ms(0), ms(50), ms(150), ms(250)]);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_stops_at_an_error_that_cannot_heal() {
        let mut tries_made = 0;
        let out: Result<(), _> = retry(
            Backoff::new(ms(50), ms(100)),
            |tries| {
                tries_made = tries;
                async move { Err(if tries == 2 { "closed" } else { "down" }) }
            },
            |e| *e != "closed",
        )
        .await;
        assert!(matches!(
            out,
            Err(RetryError::Permanent {
                error: "closed",
                tries: 2
            })
        ));
        assert_eq!(tries_made, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_gives_up_before_a_try_that_would_start_past_its_bound() {
        let start = Instant::now();
        let out: Result<(), _> = retry(
            Backoff::new(ms(50), ms(1000)).give_up_after(ms(300)).pause_first(),
            |_| async { Err("down") },
            |_| true,
        )
        .await;
        // Tries after 50, 150 ms; the next (at 350 ms) would pass the bound.
        assert!(matches!(
            out,
            Err(RetryError::GaveUp {
                last: Some("down"),
                tries: 2
            })
        ));
        assert_eq!(start.elapsed(), ms(150));
    }

    #[tokio::test(start_paused = true)]
    async fn pause_first_waits_before_the_first_try() {
        let start = Instant::now();
        let out = retry(
            Backoff::new(ms(50), ms(1000)).pause_first(),
            |_| async move { Ok::<_, ()>(start.elapsed()) },
            |_| true,
        )
        .await;
        assert_eq!(out.unwrap(), ms(50));
    }

    /// A clean-up task runs `retry` over a step whose state lives across tries (what is still
    /// left): the future is `Send` for [`crate::driver::cleanup::spawn`].
    #[tokio::test]
    async fn a_retry_over_state_kept_across_tries_can_be_spawned() {
        let task = async {
            let left = std::sync::Mutex::new(vec![1, 2, 3]);
            let _ = retry(
                Backoff::new(ms(1), ms(1)),
                |_| async {
                    left.lock().unwrap().pop();
                    tokio::task::yield_now().await;
                    if left.lock().unwrap().is_empty() {
                        Ok(())
                    } else {
                        Err(())
                    }
                },
                |()| true,
            )
            .await;
            let n = left.lock().unwrap().len();
            n
        };
        assert_eq!(tokio::spawn(task).await.unwrap(), 0);
    }
}
