//! Who leads an election (the first entry of its queue, once granted), and observing it: read
//! again when a NOTIFY says the election's queue changed, or at the leader's expiry (the loop of
//! locksmith-core's `observe_by_reading`, with an asynchronous read).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use locksmith_core::driver::observe::LeaderRead;
use locksmith_core::driver::LockName;
use locksmith_core::{Family, Leader, LeaderWatch, LockError, Result};

use crate::conn::Conn;
use crate::layout::segment;
use crate::listing::read_queue;

/// Who leads, as one read of the queue says, and when the answer changes unless someone acts:
/// the leader's lease runs out, or the first candidate's heartbeat does (its locker stopped
/// beating: a dead process, whose grant nobody will take).
async fn read(conn: &Conn, seg: &str) -> Result<(LeaderRead, Option<Instant>)> {
    let rows = read_queue(conn, seg).await?;
    let Some(e) = rows.first() else {
        return Ok((LeaderRead::Nobody, None));
    };
    let runs_out = Instant::now() + e.left();
    Ok(match e.token {
        Some(token) => {
            let leader = Leader {
                value: e.value.clone(),
                term: u64::try_from(token).unwrap_or(0),
                holder_id: e.holder_id(),
            };
            (LeaderRead::Leads(leader, runs_out), Some(runs_out))
        }
        // A millisecond more makes sure the heartbeat has run out on the server's clock too.
        None => (LeaderRead::Pending, Some(runs_out + Duration::from_millis(1))),
    })
}

/// The leader of election `name` now.
pub(crate) async fn leader(conn: &Conn, name: &LockName) -> Result<Option<Leader>> {
    Ok(read(conn, &segment(Family::Election, name)).await?.0.leader())
}

/// Watches election `name`; the observation holds the backend weakly and ends with it or with
/// the watch.
pub(crate) async fn observe(conn: &Arc<Conn>, name: &LockName) -> Result<LeaderWatch> {
    let seg = segment(Family::Election, name);
    let changed = conn.hub.lock(&seg);
    let first = read(conn, &seg).await?.0.leader();
    let (tx, rx) = watch::channel(first);
    let conn: Weak<Conn> = Arc::downgrade(conn);
    let task = tokio::spawn(async move {
        loop {
            let woken = changed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let Some(c) = conn.upgrade() else { return };
            let now = read(&c, &seg).await;
            drop(c);
            let mut retry = None;
            let expiry = match &now {
                Ok((_, runs_out)) => *runs_out,
                Err(_) => None,
            };
            match now.map(|(read, _)| read) {
                // A hand-over under way: the grant (or the candidate leaving) notifies; a
                // candidate that died first is read again when its heartbeat runs out.
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
                // The locker was shut down: the observation ends (`changed` fails).
                Err(LockError::Closed) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "postgres: reading an election failed; trying again");
                    retry = Some(Instant::now() + Duration::from_millis(200));
                }
            }
            let far = Instant::now() + Duration::from_secs(86_400);
            let at = [expiry, retry].into_iter().flatten().min().unwrap_or(far);
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(at) => {}
                _ = tx.closed() => return,
            }
        }
    });
    Ok(LeaderWatch::new(rx, task))
}
