//! Who leads an election (the first entry of its queue, once granted), and observing it: read
//! again when a wake-up says the election's queue changed (the observer's locker is in
//! `locksmith_watches`, `wake.rs` delivers), or at the leader's expiry (the loop of
//! locksmith-core's `observe_by_reading_async`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use locksmith_core::driver::observe::{observe_by_reading_async, LeaderRead, Reading};
use locksmith_core::driver::LockName;
use locksmith_core::{Family, Leader, LeaderWatch, Result};

use crate::conn::{Conn, StepError};
use crate::layout::{segment, sql};
use crate::listing::read_queue;
use crate::protocol::queue::holder_id;

async fn read(conn: &Conn, seg: &str) -> Result<(LeaderRead, Option<Instant>)> {
    let rows = read_queue(conn, seg.to_owned()).await?;
    let Some(e) = rows.first() else {
        return Ok((LeaderRead::Nobody, None));
    };
    let runs_out = Instant::now() + e.left();
    Ok(if e.held {
        let leader = Leader {
            value: e.value.clone(),
            term: e.token,
            holder_id: holder_id(e.owner, e.id),
        };
        (LeaderRead::Leads(leader, runs_out), Some(runs_out))
    } else {
        (LeaderRead::Pending, Some(runs_out + Duration::from_millis(1)))
    })
}

/// The leader of election `name`, if any.
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn leader(conn: &Conn, name: &LockName) -> Result<Option<Leader>> {
    Ok(read(conn, &segment(Family::Election, name)?).await?.0.leader())
}

/// Observes election `name`.
///
/// # Errors
///
/// The connection's errors (for the first read).
pub(crate) async fn observe(conn: &Arc<Conn>, name: &LockName) -> Result<LeaderWatch> {
    let seg = segment(Family::Election, name)?;
    let (owner, watched) = (conn.owner, seg.clone());
    conn.step("watching an election", false, move |c| {
        let watched = watched.clone();
        Box::pin(async move {
            let e = |err| StepError::sql("watching an election", err);
            // One transaction: the lock's row, made if missing and locked as a step locks it,
            // stays locked until the watch is in, so that a prune never removes the row
            // between the two (`prune.rs`).
            locksmith_core::metrics::round_trip(); // BEGIN
            let mut tx = sqlx::Connection::begin(&mut *c)
                .await
                .map_err(|err| StepError::unsent("beginning a transaction", err))?;
            locksmith_core::metrics::round_trip();
            sqlx::query(sql::LOCK_ROW)
                .bind(&watched)
                .execute(&mut *tx)
                .await
                .map_err(e)?;
            locksmith_core::metrics::round_trip();
            sqlx::query(sql::WATCH)
                .bind(owner)
                .bind(&watched)
                .execute(&mut *tx)
                .await
                .map_err(e)?;
            locksmith_core::metrics::round_trip(); // COMMIT
            tx.commit().await.map_err(e)?;
            Ok(())
        })
    })
    .await?;
    let changed = conn.hub.segment(&seg);
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
