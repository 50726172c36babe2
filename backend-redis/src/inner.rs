//! What every clone of a backend, every waiter and every clean-up task shares — the parsed URL
//! and the servers — and the two helpers that make a lease: a fresh holder token and the
//! [`Lease`] of a granted lock. A leaf module: it imports no other module of the crate but the
//! configuration, the keys and the servers.

use lockcore::{Lease, LockError, LockName, LockRequest, LostSignal, Result};
use tokio::time::Instant;

use crate::config::Config;
use crate::keys::LockKeys;
use crate::session::Node;

/// What every clone of a backend and every clean-up task shares.
pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) nodes: Vec<Node>,
}

impl Inner {
    pub(crate) fn keys(&self, name: &LockName) -> LockKeys {
        LockKeys::new(&self.config.prefix, self.config.layout, name)
    }

    /// Refuses a TTL that could outlast the restart delay (see the crate docs, "After data loss").
    pub(crate) fn check_ttl(&self, req: &LockRequest) -> Result<()> {
        let delay = self.config.restart_delay;
        if delay.is_zero() || req.ttl <= delay {
            return Ok(());
        }
        Err(LockError::InvalidOption(format!(
            "ttl {:?} is longer than the Redis backend's restart_delay {delay:?}: after Redis loses its \
             data (a restart without persistence) no lock is granted for restart_delay, so that every \
             lease granted before has run out; raise restart_delay in the URL to at least the longest \
             TTL (or set restart_delay=0 if Redis persists every write)",
            req.ttl
        )))
    }

    pub(crate) fn is_quorum(&self) -> bool {
        self.nodes.len() > 1
    }
}

/// A fresh random 128-bit holder token, as 32 hex digits.
pub(crate) fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The lease for a lock taken with `token` by a request sent at `sent`.
pub(crate) fn lease(req: &LockRequest, fence: u64, token: String, sent: Instant) -> Lease {
    Lease {
        name: req.name.clone(),
        kind: req.kind.clone(),
        fencing_token: fence,
        ttl: req.ttl,
        holder_id: token,
        acquired_at: sent,
        lost: LostSignal::new(),
    }
}
