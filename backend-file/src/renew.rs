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
use crate::conn::{Check, Dir, Renewed};
use crate::error::{join_error, may_pass};
use crate::layout::LockFile;
use crate::protocol::state::{entry_id, State};

/// Renews `leases`; one result per lease, in order.
pub(crate) async fn renew_many(dir: &Arc<Dir>, leases: &[Lease]) -> Vec<Result<()>> {
    let (dir, leases) = (dir.clone(), leases.to_vec());
    let count = leases.len();
    let renewed = tokio::task::spawn_blocking(move || {
        // From the first renewal on, the kernel says which state files changed (see `wake.rs`);
        // without it, every renewal reads them all.
        if let Err(e) = dir.hub.start() {
            tracing::warn!(error = %e, "file backend: no wake-ups; renewals read every state file");
        }
        let sent = Instant::now();
        let abandoned = match dir.beat() {
            Ok(abandoned) => abandoned,
            Err(e) => return leases.iter().map(|_| Err(again(&e))).collect(),
        };
        let mut states: HashMap<String, std::result::Result<Option<State>, String>> = HashMap::new();
        let mut lost_in_file = Vec::new();
        let results = leases
            .iter()
            .map(|lease| {
                let id = entry_id(&lease.holder_id);
                let in_file = match dir.check(id) {
                    Check::Gone => Ok(false),
                    Check::Unchanged => Ok(true),
                    Check::Read(file) => match states.entry(file.stem.clone()).or_insert_with(|| read(&dir, &file)) {
                        Ok(state) => Ok(state
                            .as_ref()
                            .is_some_and(|s| s.entries.iter().any(|e| *e.id == *id && e.grant.is_some()))),
                        Err(message) => Err(message.clone()),
                    },
                };
                let not_held = || LockError::not_held(lease.name.as_str());
                match in_file {
                    // Not read, so not known to be gone: tried again until the lease runs out.
                    Err(message) => {
                        dir.read_again(id);
                        Err(LockError::Unavailable {
                            message: format!("renewal failed: {message}"),
                            source: None,
                        })
                    }
                    Ok(true) => match dir.renewed(id, sent) {
                        Renewed::Yes => Ok(()),
                        Renewed::Lost(file) => {
                            lost_in_file.push((id.to_owned(), file));
                            Err(not_held())
                        }
                        Renewed::NotHeld => Err(not_held()),
                    },
                    Ok(false) => {
                        dir.forget(id);
                        Err(not_held())
                    }
                }
            })
            .collect();
        // A lease lost to a pause leaves the file too: this locker's next heartbeats would
        // otherwise keep its entry alive, holding the lock for nobody.
        reap_now(&dir, abandoned.into_iter().chain(lost_in_file).collect());
        results
    })
    .await;
    renewed.unwrap_or_else(|e| {
        let e = join_error(e);
        (0..count).map(|_| Err(again(&e))).collect()
    })
}

/// The state of `file` for a renewal, or why it could not be read (an I/O error: the lease is
/// not known to be gone). A file that is not a state file (emptied by hand) has no entry.
fn read(dir: &Dir, file: &LockFile) -> std::result::Result<Option<State>, String> {
    match dir.read_raw(file) {
        Ok(state) => Ok(Some(state)),
        Err(e) if may_pass(&e) => Err(e.to_string()),
        Err(_) => Ok(None),
    }
}

/// One error for each of several leases (a failed heartbeat fails all of them): a failure to
/// renew, which the watchdog retries until the lease runs out.
fn again(e: &LockError) -> LockError {
    LockError::Unavailable {
        message: format!("renewal failed: {e}"),
        source: None,
    }
}
