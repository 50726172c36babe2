//! `renew_many`: one heartbeat renews every entry of the locker (see `conn/owner.rs`), so renewing
//! costs one small write however many locks are held. A lease whose TTL passed under the previous
//! heartbeat (the process was paused) answers `NotHeld`, and the watchdog fires its lost signal.
//! So does a lease whose entry is gone from its state file (the file was removed or rewritten by
//! hand): a renewal reads the state files that changed since it last read them, as the kernel
//! reports changes (`wake.rs`), so 10,000 held locks that nobody touches cost no read at all
//! (reading each of them every third of a TTL kept a busy 2-core machine from renewing in time).
//! The same heartbeat finds the leases whose guard stopped renewing them, and removes them.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

use locksmith_core::driver::Lease;
use locksmith_core::{LockError, Result};

use crate::cleanup::reap_now;
use crate::conn::{Check, Dir};
use crate::error::join_error;
use crate::protocol::state::{entry_id, State};

/// Renews `leases`; one result per lease, in order.
pub(crate) async fn renew_many(dir: &Arc<Dir>, leases: &[Lease]) -> Vec<Result<()>> {
    let (dir, leases) = (dir.clone(), leases.to_vec());
    let count = leases.len();
    let renewed = tokio::task::spawn_blocking(move || {
        let sent = Instant::now();
        let abandoned = match dir.beat() {
            Ok(abandoned) => abandoned,
            Err(e) => return leases.iter().map(|_| Err(again(&e))).collect(),
        };
        let mut states: HashMap<String, Option<State>> = HashMap::new();
        let results = leases
            .iter()
            .map(|lease| {
                let id = entry_id(&lease.holder_id);
                let in_file = match dir.check(id) {
                    Check::Gone => false,
                    Check::Unchanged => true,
                    Check::Read(file) => states
                        .entry(file.stem.clone())
                        .or_insert_with(|| dir.read_raw(&file).ok())
                        .as_ref()
                        .is_some_and(|s| s.entries.iter().any(|e| e.id == id && e.grant.is_some())),
                };
                if in_file && dir.renewed(id, sent) {
                    Ok(())
                } else {
                    dir.forget(id);
                    Err(LockError::not_held(lease.name.as_str()))
                }
            })
            .collect();
        reap_now(&dir, abandoned);
        results
    })
    .await;
    renewed.unwrap_or_else(|e| {
        let e = join_error(e);
        (0..count).map(|_| Err(again(&e))).collect()
    })
}

/// One error for each of several leases (a failed heartbeat fails all of them): a failure to
/// renew, which the watchdog retries until the lease runs out.
fn again(e: &LockError) -> LockError {
    LockError::Unavailable {
        message: format!("renewal failed: {e}"),
        source: None,
    }
}
