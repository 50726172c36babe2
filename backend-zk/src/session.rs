//! One ZooKeeper session: the client, the leases held through it, and a monitor task that turns
//! session events into `lost()` signals and reaps leases nobody renews any more.
//!
//! The session *is* the lease: the client's heartbeats keep it alive, and every contender node it
//! created is ephemeral, so the server deletes them all when the session expires. The registry of
//! held leases exists for what the server cannot know:
//! - which leases to declare lost when the session ends (monitor, at once);
//! - which leases were abandoned while the process and its session live on (a guard forgotten
//!   with `abandon()`, a watchdog that stopped): a lease not renewed within its TTL is deleted by
//!   the monitor, as the server would delete it if the process had died.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lockcore::{Lease, LockError, LockName, LostReason, LostSignal, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::ZkConfig;

/// A connected ZooKeeper session and the leases held through it.
pub(crate) struct Session {
    /// The client; clones share the session.
    pub(crate) client: zk::Client,
    /// The server's session id (the `ephemeralOwner` of our nodes).
    pub(crate) id: i64,
    /// The session timeout the server granted: the effective TTL of every lease.
    pub(crate) timeout: Duration,
    held: Mutex<HashMap<String, Held>>,
}

/// A lease held through this session, keyed by its node path.
struct Held {
    name: LockName,
    czxid: i64,
    lost: LostSignal,
    /// When the monitor deletes the node unless a renewal moves this on.
    expires: Instant,
    /// Released by its holder but not deleted yet: the monitor deletes it without firing `lost()`.
    released: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &format_args!("{:#x}", self.id))
            .field("timeout", &self.timeout)
            .field("state", &self.state())
            .finish()
    }
}

impl Session {
    /// Establishes a new session, giving up with [`LockError::Unavailable`] after the connect
    /// timeout, and starts its monitor task.
    pub(crate) async fn connect(config: &ZkConfig) -> Result<Arc<Session>> {
        let mut connector = zk::Client::connector().with_session_timeout(config.session_timeout);
        if let Some(auth) = &config.digest_auth {
            connector = connector.with_auth("digest", auth);
        }
        let what = format!("connecting to ZooKeeper at {}", config.connect_string);
        let client = match tokio::time::timeout(config.connect_timeout, connector.connect(&config.connect_string)).await
        {
            Ok(Ok(client)) => client,
            Ok(Err(zk::Error::BadArguments(reason))) => {
                return Err(LockError::InvalidUrl {
                    url: config.connect_string.clone(),
                    reason: reason.to_string(),
                })
            }
            Ok(Err(e)) => return Err(LockError::unavailable(what, e)),
            Err(_) => {
                return Err(LockError::Unavailable {
                    message: format!(
                        "{what}: no session within the connect timeout of {:?}",
                        config.connect_timeout
                    ),
                    source: None,
                })
            }
        };
        let session = Arc::new(Session {
            id: client.session_id().0,
            timeout: client.session_timeout(),
            held: Mutex::new(HashMap::new()),
            client,
        });
        tracing::info!(session = %format_args!("{:#x}", session.id), timeout = ?session.timeout, "ZooKeeper session established");
        tokio::spawn(monitor(Arc::downgrade(&session), session.client.state_watcher()));
        Ok(session)
    }

    /// The client's view of the session state.
    pub(crate) fn state(&self) -> zk::SessionState {
        self.client.state()
    }

    /// True once the session can never be used again (expired, closed, auth failed).
    pub(crate) fn is_terminated(&self) -> bool {
        self.state().is_terminated()
    }

    fn held(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts tracking a lease just obtained through this session.
    pub(crate) fn register(&self, lease: &Lease, czxid: i64) {
        let held = Held {
            name: lease.name.clone(),
            czxid,
            lost: lease.lost.clone(),
            expires: lease.acquired_at + lease.ttl,
            released: false,
        };
        self.held().insert(lease.holder_id.clone(), held);
    }

    /// Hands a released lease whose delete failed to the monitor, which retries it at once.
    pub(crate) fn register_for_removal(&self, lease: &Lease) {
        let held = Held {
            name: lease.name.clone(),
            czxid: i64::try_from(lease.fencing_token).unwrap_or(-1),
            lost: lease.lost.clone(),
            expires: Instant::now(),
            released: true,
        };
        self.held().insert(lease.holder_id.clone(), held);
    }

    /// The creation zxid of the held node at `path`, if this session holds it.
    pub(crate) fn held_czxid(&self, path: &str) -> Option<i64> {
        self.held().get(path).filter(|h| !h.released).map(|h| h.czxid)
    }

    /// Records that the lease at `path` was confirmed by a request sent at `sent`.
    pub(crate) fn renewed(&self, path: &str, sent: Instant) {
        if let Some(h) = self.held().get_mut(path) {
            h.expires = h.expires.max(sent + self.timeout);
        }
    }

    /// Stops tracking the lease at `path` (released or gone); true if it was tracked.
    pub(crate) fn forget(&self, path: &str) -> bool {
        self.held().remove(path).is_some()
    }

    /// Fires `lost()` of every tracked lease and forgets them all.
    fn lose_all(&self, why: &str) {
        let all: Vec<(String, Held)> = self.held().drain().collect();
        for (path, held) in all {
            if !held.released && held.lost.fire(LostReason::LeaseGone(why.to_owned())) {
                tracing::warn!(lock = %held.name, node = %path, reason = why, "lock lost");
            }
        }
    }

    /// Deletes the nodes of leases nobody renewed within their TTL, firing their `lost()` first.
    async fn reap_abandoned(&self) {
        let now = Instant::now();
        let due: Vec<(String, LockName, LostSignal, bool)> = self
            .held()
            .iter()
            .filter(|(_, h)| h.expires <= now)
            .map(|(path, h)| (path.clone(), h.name.clone(), h.lost.clone(), h.released))
            .collect();
        for (path, name, lost, released) in due {
            if !released
                && lost.fire(LostReason::LeaseGone(
                    "not renewed within its TTL; deleted by the backend".into(),
                ))
            {
                tracing::warn!(lock = %name, node = %path, "lease not renewed within its TTL (abandoned?): deleting its node");
            }
            match self.client.delete(&path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {
                    self.forget(&path);
                }
                // Kept: the next round tries again, unless the session ends first.
                Err(e) => tracing::debug!(node = %path, error = %e, "could not delete an abandoned lease yet"),
            }
        }
    }
}

/// Watches the session state and reaps abandoned leases until the session is dropped or ends.
///
/// Curator's connection states map onto the guard like this:
/// - `SUSPENDED` (disconnected, session maybe alive): nothing fires at once; renewals fail, and the
///   watchdog fires `lost()` (`RenewalFailed`) once no renewal succeeded for TTL − TTL/10;
/// - `RECONNECTED` within the session timeout: locks are still held, renewals succeed again;
/// - `LOST` (session expired, closed, or auth failed): `lost()` fires here at once (`LeaseGone`).
async fn monitor(session: Weak<Session>, mut states: zk::StateWatcher) {
    let tick = match session.upgrade() {
        Some(s) => (s.timeout / 10).max(Duration::from_millis(10)),
        None => return,
    };
    loop {
        let state = tokio::select! {
            state = states.changed() => Some(state),
            _ = tokio::time::sleep(tick) => None,
        };
        let Some(session) = session.upgrade() else { return };
        match state {
            Some(state) if state.is_terminated() => {
                tracing::warn!(session = %format_args!("{:#x}", session.id), %state, "ZooKeeper session ended (Curator: LOST)");
                session.lose_all(&format!("the ZooKeeper session {:#x} ended: {state}", session.id));
                return;
            }
            Some(zk::SessionState::Disconnected) => tracing::warn!(
                session = %format_args!("{:#x}", session.id),
                "disconnected from ZooKeeper (Curator: SUSPENDED); locks are lost if this lasts near the session timeout"
            ),
            Some(state) => {
                tracing::info!(session = %format_args!("{:#x}", session.id), %state, "ZooKeeper connection state")
            }
            None => session.reap_abandoned().await,
        }
    }
}
