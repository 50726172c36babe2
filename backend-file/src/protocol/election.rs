//! Who leads an election (the first entry of its queue, once granted), and observing it: woken by
//! the kernel when the election's state file changes, or at the leader's expiry.

use std::sync::{Arc, Weak};

use tokio::sync::watch;
use tokio::time::Instant;

use lockcore::driver::LockName;
use lockcore::{Family, Leader, LeaderWatch, Result};

use super::state::Now;
use crate::conn::Dir;
use crate::layout::LockFile;

/// Who leads, as one read of the state file says.
enum LeaderNow {
    /// This leader, whose lease runs out at this instant (`CLOCK_BOOTTIME` ns) unless renewed.
    Leads(Leader, u64),
    /// Nobody holds, but a candidate is first in line: it takes over as soon as it takes its turn.
    Pending,
    /// Nobody leads and nobody waits.
    Nobody,
}

impl LeaderNow {
    fn leader(self) -> Option<Leader> {
        match self {
            LeaderNow::Leads(leader, _) => Some(leader),
            LeaderNow::Pending | LeaderNow::Nobody => None,
        }
    }
}

fn read(dir: &Dir, file: &LockFile) -> Result<LeaderNow> {
    let state = dir.read(file)?;
    Ok(match state.entries.first() {
        Some(e) => match e.grant {
            Some(g) => LeaderNow::Leads(
                Leader {
                    value: e.value.clone(),
                    term: g.token,
                    holder_id: e.holder_id(),
                },
                e.expires_ns,
            ),
            None => LeaderNow::Pending,
        },
        None => LeaderNow::Nobody,
    })
}

/// The leader of election `name` now.
pub(crate) fn leader(dir: &Dir, name: &LockName) -> Result<Option<Leader>> {
    Ok(read(dir, &LockFile::of(Family::Election, name))?.leader())
}

/// Watches election `name`: the leader now, then each change. A handover is one change: while a
/// candidate first in line is about to take over, the last leader stays reported. The task ends
/// when the watch is dropped or the backend is.
pub(crate) fn observe(dir: &Arc<Dir>, name: &LockName) -> Result<LeaderWatch> {
    let file = LockFile::of(Family::Election, name);
    let (tx, rx) = watch::channel(read(dir, &file)?.leader());
    let wake = dir.hub.lock(&file.stem);
    let dir: Weak<Dir> = Arc::downgrade(dir);
    let task = tokio::spawn(async move {
        loop {
            let woken = wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let read = match dir.upgrade() {
                Some(dir) => read(&dir, &file),
                None => return,
            };
            let expiry = match &read {
                Ok(LeaderNow::Leads(_, expiry)) => Some(Instant::now() + Now::read().until(*expiry)),
                _ => None,
            };
            match read {
                Ok(LeaderNow::Pending) => {}
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
                Err(e) => {
                    tracing::debug!(error = %e, "file backend: reading an election failed; trying again when it changes")
                }
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
