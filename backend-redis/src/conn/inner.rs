//! What every clone of a backend, every waiter and every clean-up task shares — the parsed URL
//! and the servers — and the two helpers that make a lease: a fresh holder token and the
//! [`Lease`](locksmith_core::driver::Lease) of a granted lock. A leaf module: it imports no other module of the crate but the
//! configuration, the keys and the servers.

use locksmith_core::driver::{LockName, LockRequest};
use locksmith_core::{Family, LockError, Result};

use crate::config::{Config, Layout};
use crate::conn::node::Node;
use crate::layout::{KindKeys, LockKeys};

/// What every clone of a backend and every clean-up task shares.
pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) nodes: Vec<Node>,
}

impl Inner {
    pub(crate) fn keys(&self, name: &LockName) -> LockKeys {
        LockKeys::new(&self.config.prefix, self.config.layout, name)
    }

    /// The keys of `family`'s lock `name` (any family but the mutex).
    pub(crate) fn kind_keys(&self, family: Family, name: &LockName) -> KindKeys {
        KindKeys::new(&self.config.prefix, family, name)
    }

    /// Refuses the families this configuration cannot serve ([`LockError::InvalidOption`], saying
    /// why): every one but the mutex in quorum mode and in the plain layout.
    pub(crate) fn check_family(&self, family: Family) -> Result<()> {
        if family == Family::Mutex {
            return Ok(());
        }
        let what = family.name();
        if self.is_quorum() {
            return Err(LockError::InvalidOption(format!(
                "the Redis quorum mode (several independent masters) serves mutexes only, not a {what}: \
                 each master would count holders on its own, so a semaphore could be over-granted (with \
                 3 masters and 2 permits, three clients can each hold a different majority: every master \
                 sees 2 holders, yet 3 hold), and it has no queue to keep waiters in order or push \
                 leader changes; use one server, Redis Sentinel or Redis Cluster for {what}s"
            )));
        }
        if self.config.layout == Layout::Plain {
            return Err(LockError::InvalidOption(format!(
                "layout=plain keeps mutexes in the raw keys of redis-py, redsync and node-redlock, \
                 which have no {what}s to share keys with; use the default layout for {what}s"
            )));
        }
        Ok(())
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
