//! The automatic passes of pruning (`prune.rs`): a directory is pruned about every [`EVERY`] by
//! whichever of its processes comes first, going by when it was last pruned (`.pruned.lock`'s
//! modification time, [`Dir::last_pass`]), not by when each process opened it.
//!
//! A process that opens a directory last pruned [`EVERY`] ago (or never) runs a pass at once, in
//! the background: a `locksmith run` lives a few milliseconds and never reached a pass 5 minutes
//! after it started, so a directory used only by short-lived processes kept every file it ever
//! had. The passes of other processes then wait: one pass a directory about every [`EVERY`],
//! however many processes open it. A pass that finds another one running leaves the work to it.
//! An automatic pass looks at a window of [`super::prune::AUTO_LOOKS`] locks of a larger
//! directory and removes at most [`BATCH`]; a locker whose pass stopped at [`BATCH`] runs the next
//! a second later.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::prune::{Kind, Pass, BATCH};
use super::Dir;

/// How long a lock's files must have been left alone before the automatic passes remove them.
pub(crate) const IDLE: Duration = Duration::from_secs(3600);

/// About how often a directory is pruned: once its last pass is this old, the next process to
/// look runs one (each long-lived locker looks again within a half of it after it is due).
pub(crate) const EVERY: Duration = Duration::from_secs(600);

/// How long after a pass that stopped at [`BATCH`] the next one comes.
const MORE_LEFT: Duration = Duration::from_secs(1);

/// How long until the directory's next pass is due, at `now`, when its last one ended at `last`:
/// none if it was never pruned, or if its last pass is later than `now` (a clock set back).
fn due_in(last: Option<SystemTime>, now: SystemTime, every: Duration) -> Duration {
    match last.map(|last| now.duration_since(last)) {
        Some(Ok(age)) => every.saturating_sub(age),
        _ => Duration::ZERO,
    }
}

/// A random share of up to half of `every`, so that the lockers of a directory do not all look
/// at the same moment.
fn spread(every: Duration) -> Duration {
    every.mul_f64(crate::random::unit() / 2.0)
}

/// Starts this locker's automatic passes (one whenever the directory's last pass is `every` old,
/// removing what has been idle for `idle`) in the runtime it is opened in, if any, until it is
/// shut down or dropped: the first at once if the directory is due. A pass that fails is logged
/// and tried again later.
pub(crate) fn keep_pruning(dir: &Arc<Dir>, every: Duration, idle: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let dir = Arc::downgrade(dir);
    runtime.spawn(async move {
        // The first look at once: a directory due now is pruned now.
        let mut wait = Duration::ZERO;
        // Whether this locker's last pass stopped at its limit: the next comes soon, whatever
        // the directory's last pass (that one) says.
        let mut more_left = false;
        loop {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let Some(dir) = dir.upgrade() else { return };
            if !std::mem::take(&mut more_left) {
                let due = due_in(dir.last_pass(), SystemTime::now(), every);
                if !due.is_zero() {
                    // Not yet, or another process pruned the directory meanwhile.
                    wait = due + spread(every);
                    continue;
                }
            }
            let pass = tokio::task::spawn_blocking(move || dir.prune(idle, false, BATCH, Kind::Automatic)).await;
            wait = match pass.map_err(crate::error::join_error).and_then(|pass| pass) {
                Ok(Pass::Ran { report, full }) => {
                    if report.locks + report.owners > 0 {
                        tracing::debug!(
                            locks = report.locks,
                            owners = report.owners,
                            "file backend: pruned idle locks"
                        );
                    }
                    more_left = full;
                    match full {
                        true => MORE_LEFT,
                        false => every + spread(every),
                    }
                }
                // Another process's pass is running, and records its end.
                Ok(Pass::Skipped) => every / 2 + spread(every),
                Err(locksmith_core::LockError::Closed) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "file backend: a pass of pruning failed; trying again later");
                    every / 2 + spread(every)
                }
            };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_never_pruned_or_pruned_long_ago_is_due_now() {
        let now = SystemTime::now();
        assert_eq!(due_in(None, now, EVERY), Duration::ZERO);
        assert_eq!(due_in(Some(now - EVERY), now, EVERY), Duration::ZERO);
        assert_eq!(due_in(Some(now - EVERY * 3), now, EVERY), Duration::ZERO);
    }

    #[test]
    fn a_directory_pruned_lately_is_due_when_its_last_pass_is_every_old() {
        let now = SystemTime::now();
        let last = now - Duration::from_secs(100);
        assert_eq!(due_in(Some(last), now, EVERY), EVERY - Duration::from_secs(100));
    }

    #[test]
    fn a_last_pass_ahead_of_the_clock_is_due_now() {
        let now = SystemTime::now();
        assert_eq!(due_in(Some(now + Duration::from_secs(5)), now, EVERY), Duration::ZERO);
    }
}
