//! Observing an election by reading it again: for backends that can read who leads at any moment
//! and are told (by the kernel, a watch, an in-process notification) when the election's state
//! changed, rather than being pushed the new leader itself (`mem://`, `file://`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::election::{Leader, LeaderWatch};
use crate::error::{LockError, Result};

/// Who leads an election, as one read of a backend's state says.
#[derive(Clone, Debug)]
pub enum LeaderRead {
    /// This leader, whose lease runs out at this instant unless renewed.
    Leads(Leader, Instant),
    /// Nobody holds, but a candidate is first in line: it takes over as soon as its `acquire`
    /// takes its turn.
    Pending,
    /// Nobody leads and nobody waits.
    Nobody,
}

impl LeaderRead {
    /// The leader, if one holds.
    pub fn leader(self) -> Option<Leader> {
        match self {
            LeaderRead::Leads(leader, _) => Some(leader),
            LeaderRead::Pending | LeaderRead::Nobody => None,
        }
    }
}

/// While a hand-over seems under way ([`LeaderRead::Pending`]), how long [`observe_by_reading`]
/// waits for a notification before it reads again anyway: the candidate first in line may be
/// dead (a killed or paused process), and its entry then runs out without anyone notifying.
pub const PENDING_RECHECK: Duration = Duration::from_secs(1);

/// After a read that failed (an outage), how long the observation waits before it reads again,
/// unless a notification comes first.
pub const RETRY_AFTER_ERROR: Duration = Duration::from_millis(200);

/// One read of an election: who leads, and when to read again if nothing notifies before (the
/// leader's lease or the first candidate's entry runs out then; `None`: only a notification
/// changes the answer).
#[derive(Clone, Debug)]
pub struct Reading {
    /// Who leads.
    pub now: LeaderRead,
    /// When the answer changes unless someone acts.
    pub read_again_at: Option<Instant>,
}

impl From<LeaderRead> for Reading {
    /// Read again at the leader's expiry, after [`PENDING_RECHECK`] during a hand-over, and only
    /// when notified when nobody leads or waits.
    fn from(now: LeaderRead) -> Reading {
        let read_again_at = match &now {
            LeaderRead::Leads(_, expiry) => Some(*expiry),
            LeaderRead::Pending => Some(Instant::now() + PENDING_RECHECK),
            LeaderRead::Nobody => None,
        };
        Reading { now, read_again_at }
    }
}

/// Observes an election: `read` says who leads now; it runs once at once (the first value), and
/// again, in a task, each time `changed` is notified (registered before each read, so no change
/// is missed) and when the leader's lease runs out. A handover is one change: while a candidate
/// first in line is about to take over ([`LeaderRead::Pending`]), the last leader stays reported
/// (read again every [`PENDING_RECHECK`] meanwhile).
/// `read` returns `None` when the backend is gone, which ends the observation (the watch's
/// `changed()` then fails), and an error to try again at the next change or after
/// [`RETRY_AFTER_ERROR`] ([`LockError::Closed`] ends it too).
///
/// # Errors
///
/// The error of the first read (later ones are retried).
///
/// # Panics
///
/// Outside a tokio runtime: the observation runs in a task it spawns.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use locksmith_core::driver::observe::{observe_by_reading, LeaderRead};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let changed = Arc::new(tokio::sync::Notify::new());
/// let watch = observe_by_reading(changed, || Some(Ok(LeaderRead::Nobody))).unwrap();
/// assert!(watch.leader().is_none());
/// # }
/// ```
pub fn observe_by_reading<R>(changed: Arc<Notify>, mut read: R) -> Result<LeaderWatch>
where
    R: FnMut() -> Option<Result<LeaderRead>> + Send + 'static,
{
    let first = match read() {
        Some(first) => first?.leader(),
        None => None,
    };
    Ok(observe_from(changed, first, move || {
        let now = read().map(|r| r.map(Reading::from));
        std::future::ready(now)
    }))
}

/// [`observe_by_reading`] with a read that awaits the server (a query), and says itself when to
/// read again ([`Reading::read_again_at`]).
///
/// # Errors
///
/// The first read's error.
///
/// # Panics
///
/// Outside a tokio runtime: the observation runs in a task it spawns.
///
/// # Cancel safety
///
/// Dropping the future before it resolves starts nothing: the observation's task is spawned
/// only after the first read answered.
pub async fn observe_by_reading_async<R, F>(changed: Arc<Notify>, mut read: R) -> Result<LeaderWatch>
where
    R: FnMut() -> F + Send + 'static,
    F: Future<Output = Option<Result<Reading>>> + Send + 'static,
{
    let first = match read().await {
        Some(first) => first?.now.leader(),
        None => None,
    };
    Ok(observe_from(changed, first, read))
}

/// The observation's task, once the first value is known.
fn observe_from<R, F>(changed: Arc<Notify>, first: Option<Leader>, mut read: R) -> LeaderWatch
where
    R: FnMut() -> F + Send + 'static,
    F: Future<Output = Option<Result<Reading>>> + Send + 'static,
{
    let (tx, rx) = watch::channel(first);
    let task = tokio::spawn(async move {
        loop {
            let woken = changed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let Some(now) = read().await else { return };
            let at = match now {
                // The grant (or the candidate leaving) notifies `changed`; a dead candidate's
                // entry runs out silently, and the next read sees it gone.
                Ok(Reading {
                    now: LeaderRead::Pending,
                    read_again_at,
                }) => read_again_at,
                Ok(Reading { now, read_again_at }) => {
                    let leader = now.leader();
                    tx.send_if_modified(|seen| {
                        let differs = *seen != leader;
                        if differs {
                            seen.clone_from(&leader);
                        }
                        differs
                    });
                    read_again_at
                }
                // The locker was shut down: the observation ends (`changed` fails).
                Err(LockError::Closed) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "reading an election failed; trying again");
                    Some(Instant::now() + RETRY_AFTER_ERROR)
                }
            };
            let far = Instant::now() + Duration::from_secs(86_400);
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(at.unwrap_or(far)) => {}
                _ = tx.closed() => return,
            }
        }
    });
    LeaderWatch::new(rx, task)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A leader whose lease runs out while a candidate is first in line (a hand-over seems under
    /// way), and the candidate's entry then runs out too, with nobody notifying: the observation
    /// reads again and reports nobody. Before, it waited for a notification that never came.
    #[tokio::test]
    async fn a_hand_over_nobody_completes_ends_in_nobody() {
        let reads = AtomicUsize::new(0);
        let runs_out = Instant::now() + Duration::from_millis(100);
        let leader = Leader {
            value: "dead".into(),
            term: 1,
            holder_id: "h".into(),
        };
        let read = move || {
            Some(Ok(match reads.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => LeaderRead::Leads(leader.clone(), runs_out),
                2 => LeaderRead::Pending,
                _ => LeaderRead::Nobody,
            }))
        };
        let mut watch = observe_by_reading(Arc::new(Notify::new()), read).unwrap();
        assert_eq!(watch.leader().map(|l| l.value), Some("dead".to_owned()));
        let next = tokio::time::timeout(PENDING_RECHECK * 5, watch.changed()).await;
        assert_eq!(next.expect("nobody reported").unwrap(), None);
    }
}
