//! Observing an election by reading it again: for backends that can read who leads at any moment
//! and are told (by the kernel, a watch, an in-process notification) when the election's state
//! changed, rather than being pushed the new leader itself (`mem://`, `file://`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::election::{Leader, LeaderWatch};
use crate::error::Result;

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

/// Observes an election: `read` says who leads now; it runs once at once (the first value), and
/// again, in a task, each time `changed` is notified (registered before each read, so no change
/// is missed) and when the leader's lease runs out. A handover is one change: while a candidate
/// first in line is about to take over ([`LeaderRead::Pending`]), the last leader stays reported
/// (read again every [`PENDING_RECHECK`] meanwhile).
/// `read` returns `None` when the backend is gone, which ends the observation (the watch's
/// `changed()` then fails), and an error to try again at the next change.
///
/// # Errors
///
/// The error of the first read (later ones are retried at the next change).
///
/// # Panics
///
/// Outside a tokio runtime: the observation runs in a task it spawns.
pub fn observe_by_reading<R>(changed: Arc<Notify>, mut read: R) -> Result<LeaderWatch>
where
    R: FnMut() -> Option<Result<LeaderRead>> + Send + 'static,
{
    let first = match read() {
        Some(first) => first?.leader(),
        None => None,
    };
    let (tx, rx) = watch::channel(first);
    let task = tokio::spawn(async move {
        loop {
            let woken = changed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let Some(now) = read() else { return };
            let expiry = match &now {
                Ok(LeaderRead::Leads(_, expiry)) => Some(*expiry),
                Ok(LeaderRead::Pending) => Some(Instant::now() + PENDING_RECHECK),
                _ => None,
            };
            match now {
                // The grant (or the candidate leaving) notifies `changed`; a dead candidate's
                // entry runs out silently, and the next read sees it gone.
                Ok(LeaderRead::Pending) => {}
                Ok(now) => {
                    let leader = now.leader();
                    tx.send_if_modified(|seen| {
                        let differs = *seen != leader;
                        if differs {
                            seen.clone_from(&leader);
                        }
                        differs
                    });
                }
                Err(e) => tracing::debug!(error = %e, "reading an election failed; trying again when it changes"),
            }
            let far = Instant::now() + std::time::Duration::from_secs(86_400);
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(expiry.unwrap_or(far)) => {}
                _ = tx.closed() => return,
            }
        }
    });
    Ok(LeaderWatch::new(rx, task))
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
