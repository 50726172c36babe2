//! Renewal: [`renew_many`], one keep-alive of the session lease for every lock of the batch (the
//! keep-alive stream itself is [`crate::conn::session`]'s). The locks of a batch that keep-alive
//! renewed are marked renewed, so that the sweeper does not reap them (a lock left out of the
//! batches for its TTL was abandoned: see [`crate::conn::sweep`]).

use locksmith_core::driver::Lease;
use locksmith_core::{LockError, Result};
use tokio::time::Instant;

use crate::conn::session::Session;

/// Renews `leases` with one keep-alive of the session lease they were granted on, one result per
/// lease in order: `NotHeld` for a lease the session does not hold (or holds on another session
/// lease), `Unavailable` when the keep-alive failed.
pub(crate) async fn renew_many(session: &Session, leases: &[Lease]) -> Vec<Result<()>> {
    let not_held = |l: &Lease| Err(LockError::not_held(l.name.as_str()));
    let lease_ids: Vec<Option<i64>> = leases
        .iter()
        .map(|l| {
            session
                .held
                .lease_of(&l.holder_id, i64::try_from(l.fencing_token).unwrap_or(i64::MAX))
        })
        .collect();
    let Some(session_lease) = lease_ids.iter().flatten().next().copied() else {
        return leases.iter().map(not_held).collect();
    };
    let sent = Instant::now();
    let outcome = session.keep_alive(session_lease).await;
    tracing::trace!(leases = leases.len(), took = ?sent.elapsed(), ok = ?outcome, "renew_many");
    if matches!(outcome, Ok(true)) {
        // Expiry per lock: what this batch renewed is not reaped (see `sweep`).
        let renewed = leases
            .iter()
            .zip(&lease_ids)
            .filter(|(_, id)| **id == Some(session_lease))
            .map(|(l, _)| (l.holder_id.as_str(), i64::try_from(l.fencing_token).unwrap_or(i64::MAX)));
        session.held.renewed(renewed, sent);
    }
    leases
        .iter()
        .zip(&lease_ids)
        .map(|(l, id)| match (&outcome, id) {
            (Ok(true), Some(id)) if *id == session_lease => Ok(()),
            (Err(e), Some(_)) => Err(LockError::Unavailable {
                message: e.to_string(),
                source: None,
            }),
            _ => not_held(l),
        })
        .collect()
}
