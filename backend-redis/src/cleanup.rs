//! The clean-up guard of an acquire in flight: if the acquire future is dropped (cancelled, timed
//! out) or fails before it hands a lease back, the guard removes the waiter's queue entry and any
//! lock already granted to its token, on every server, from a spawned task.
//!
//! Commands of one backend go over one connection per server in order, so the clean-up always
//! reaches a server after the acquire request it cleans up after.

use std::sync::Arc;

use crate::fanout::fan_out;
use crate::inner::Inner;
use crate::keys::LockKeys;

/// Armed from the first request of an acquire until its lease is returned.
pub(crate) struct Cleanup {
    inner: Arc<Inner>,
    keys: LockKeys,
    token: String,
    armed: bool,
}

impl Cleanup {
    pub(crate) fn new(inner: Arc<Inner>, keys: LockKeys, token: String) -> Self {
        Cleanup {
            inner,
            keys,
            token,
            armed: true,
        }
    }

    /// The acquire handed its lease back (or left nothing behind): nothing to clean up.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Cleans up now and waits for it; falls back to the background clean-up if a server fails.
    pub(crate) async fn run_now(mut self) {
        if leave_everywhere(&self.inner, &self.keys, &self.token).await {
            self.armed = false;
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (inner, keys, token) = (self.inner.clone(), self.keys.clone(), std::mem::take(&mut self.token));
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    leave_everywhere(&inner, &keys, &token).await;
                });
            }
            Err(_) => tracing::warn!(
                lock = %keys.lock,
                "acquire dropped outside a tokio runtime: its queue entry expires after waiter_ttl"
            ),
        }
    }
}

/// Runs the LEAVE script on every server; `true` if all of them answered.
async fn leave_everywhere(inner: &Inner, keys: &LockKeys, token: &str) -> bool {
    let results = fan_out(&inner.nodes, |_, n| n.leave(keys, token), |_| false).await;
    let mut all = true;
    for (node, result) in inner.nodes.iter().zip(results) {
        let Some(result) = result else { continue };
        match result {
            Ok(true) => {
                tracing::debug!(lock = %keys.lock, addr = %node.addr, "released a lock granted to a cancelled acquire")
            }
            Ok(false) => {}
            Err(e) => {
                all = false;
                tracing::warn!(lock = %keys.lock, addr = %node.addr, error = %e, "clean-up of a cancelled acquire failed");
            }
        }
    }
    all
}
