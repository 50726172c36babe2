//! `renew_many`: one transaction per lock file for all the leases due in it, all in one blocking
//! thread. A lease whose entry is gone (expired and dropped by another process, or its file
//! removed by hand) answers `NotHeld`, and the watchdog fires its lost signal.

use std::sync::Arc;

use lockcore::driver::Lease;
use lockcore::{LockError, Result};

use crate::conn::Dir;
use crate::error::join_error;
use crate::layout::LockFile;
use crate::protocol::queue;
use crate::protocol::state::entry_id;

/// Renews `leases`; one result per lease, in order.
pub(crate) async fn renew_many(dir: &Arc<Dir>, leases: &[Lease]) -> Vec<Result<()>> {
    let (dir, leases) = (dir.clone(), leases.to_vec());
    let count = leases.len();
    let renewed = tokio::task::spawn_blocking(move || {
        // The leases of each lock file, in order of their first lease.
        let mut files: Vec<(LockFile, Vec<usize>)> = Vec::new();
        for (i, lease) in leases.iter().enumerate() {
            let file = LockFile::of(lease.kind.family(), &lease.name);
            match files.iter_mut().find(|(f, _)| f.stem == file.stem) {
                Some((_, due)) => due.push(i),
                None => files.push((file, vec![i])),
            }
        }
        let mut results: Vec<Result<()>> = Vec::with_capacity(leases.len());
        results.resize_with(leases.len(), || Ok(()));
        for (file, due) in files {
            let outcome = dir.transact(&file, |state, now| {
                Ok(due
                    .iter()
                    .map(|&i| {
                        let l = &leases[i];
                        queue::renew(state, entry_id(&l.holder_id), l.ttl, now, l.name.as_str())
                    })
                    .collect::<Vec<_>>())
            });
            match outcome {
                Ok(each) => due.iter().zip(each).for_each(|(&i, r)| results[i] = r),
                Err(e) => due.iter().for_each(|&i| results[i] = Err(again(&e))),
            }
        }
        results
    })
    .await;
    renewed.unwrap_or_else(|e| {
        let e = join_error(e);
        (0..count).map(|_| Err(again(&e))).collect()
    })
}

/// One error for each of several leases (a failed transaction fails all of its leases): a
/// failure to renew, which the watchdog retries until the lease runs out.
fn again(e: &LockError) -> LockError {
    LockError::Unavailable {
        message: format!("renewal failed: {e}"),
        source: None,
    }
}
