//! The clean-up guard of an acquire in flight: if the acquire future is dropped (cancelled, timed
//! out) or fails before it hands a lease back, the guard removes the waiter's queue entry and any
//! lock already granted to its token, on every server, from a spawned task.
//!
//! Commands of one backend go over one connection per server in order, so the clean-up always
//! reaches a server after the acquire request it cleans up after.

use std::sync::Arc;

use crate::fanout::fan_out;
use crate::inner::Inner;
use crate::keys::{KindKeys, LockKeys};

/// What to clean up after.
#[derive(Clone)]
enum Target {
    /// A mutex: its keys and the waiter's token (`LEAVE` on every server).
    Mutex(Arc<LockKeys>, String),
    /// Any other kind: its keys and the waiter's entry (its `LEAVE`, on the one server).
    Kind(KindKeys, String),
}

/// Armed from the first request of an acquire until its lease is returned.
pub(crate) struct Cleanup {
    inner: Arc<Inner>,
    target: Target,
    armed: bool,
}

impl Cleanup {
    /// For a mutex acquire with `token`.
    pub(crate) fn new(inner: Arc<Inner>, keys: Arc<LockKeys>, token: String) -> Self {
        Self::armed(inner, Target::Mutex(keys, token))
    }

    /// For an acquire of another kind, with its queue `entry`.
    pub(crate) fn for_kind(inner: Arc<Inner>, keys: KindKeys, entry: String) -> Self {
        Self::armed(inner, Target::Kind(keys, entry))
    }

    fn armed(inner: Arc<Inner>, target: Target) -> Self {
        Cleanup {
            inner,
            target,
            armed: true,
        }
    }

    /// The acquire handed its lease back (or left nothing behind): nothing to clean up.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Cleans up now and waits for it; falls back to the background clean-up if a server fails.
    pub(crate) async fn run_now(mut self) {
        if leave_everywhere(&self.inner, &self.target).await {
            self.armed = false;
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (inner, target) = (self.inner.clone(), self.target.clone());
        let lock = target.describe().to_owned();
        // Counted by lockcore (lockcore::driver::cleanup): the call that dropped the guard, and
        // Locker::shutdown, wait for it.
        let spawned = lockcore::driver::cleanup::spawn(async move {
            leave_everywhere(&inner, &target).await;
        });
        if !spawned {
            tracing::warn!(
                lock,
                "acquire dropped outside a tokio runtime: its queue entry expires after waiter_ttl"
            );
        }
    }
}

impl Target {
    fn describe(&self) -> &str {
        match self {
            Target::Mutex(keys, _) => &keys.lock,
            Target::Kind(keys, _) => &keys.holders,
        }
    }
}

/// Runs the LEAVE script on every server; `true` if all of them answered.
async fn leave_everywhere(inner: &Inner, target: &Target) -> bool {
    let results = fan_out(
        &inner.nodes,
        |_, n| async move {
            match target {
                Target::Mutex(keys, token) => n.leave(keys, token).await,
                Target::Kind(keys, entry) => n.leave_kind(keys, entry).await,
            }
        },
        |_| false,
    )
    .await;
    let mut all = true;
    for (node, result) in inner.nodes.iter().zip(results) {
        let Some(result) = result else { continue };
        match result {
            Ok(true) => {
                tracing::debug!(lock = %target.describe(), addr = %node.addr, "released a lock granted to a cancelled acquire")
            }
            Ok(false) => {}
            Err(e) => {
                all = false;
                tracing::warn!(lock = %target.describe(), addr = %node.addr, error = %e, "clean-up of a cancelled acquire failed");
            }
        }
    }
    all
}
