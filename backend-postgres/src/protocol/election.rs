//! Who leads an election (the first entry of its queue, once granted), and observing it: read
//! again when a NOTIFY says the election's queue changed, or at the leader's expiry (the loop of
//! locksmith-core's `observe_by_reading_async`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use locksmith_core::driver::observe::{observe_by_reading_async, LeaderRead, Reading};
use locksmith_core::driver::LockName;
use locksmith_core::{Family, Leader, LeaderWatch, Result};

use crate::conn::Conn;
use crate::layout::segment;
use crate::listing::read_queue;

/// Who leads, as one read of the queue says, and when the answer changes unless someone acts:
/// the leader's lease runs out, or the first candidate's heartbeat does (its locker stopped
/// beating: a dead process, whose grant nobody will take).
async fn read(conn: &Arc<Conn>, seg: &str) -> Result<(LeaderRead, Option<Instant>)> {
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
pub(crate) async fn leader(conn: &Arc<Conn>, name: &LockName) -> Result<Option<Leader>> {
    Ok(read(conn, &segment(Family::Election, name)).await?.0.leader())
}

/// Watches election `name` (locksmith-core's `observe_by_reading_async`, woken by the schema's
/// NOTIFY); the observation holds the backend weakly and ends with it or with the watch.
pub(crate) async fn observe(conn: &Arc<Conn>, name: &LockName) -> Result<LeaderWatch> {
    let seg = segment(Family::Election, name);
    let changed = conn.hub.lock(&seg);
    let conn: Weak<Conn> = Arc::downgrade(conn);
    observe_by_reading_async(changed, move || {
        let (conn, seg) = (conn.clone(), seg.clone());
        async move {
            let conn = conn.upgrade()?;
            Some(
                read(&conn, &seg)
                    .await
                    .map(|(now, read_again_at)| Reading { now, read_again_at }),
            )
        }
    })
    .await
}
