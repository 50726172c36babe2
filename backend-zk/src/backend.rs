//! [`ZkBackend`]: the [`LockBackend`] over one ZooKeeper session at a time.

use std::sync::Arc;
use std::time::Duration;

use lockcore::{
    async_trait, BackendUrl, HolderInfo, Lease, LockBackend, LockError, LockInfo, LockName, LockRequest, LostSignal,
    Outage, Result,
};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::ZkConfig;
use crate::error::to_lock_error;
use crate::layout;
use crate::queue::{Contender, Failure, Granted};
use crate::renew::renew_all;
use crate::session::Session;
use crate::watch::watch_held;

/// How many times one `acquire`/`try_acquire` starts over after its session ended or its node
/// vanished before it gives up with [`LockError::Unavailable`].
const MAX_RESTARTS: usize = 5;

/// The ZooKeeper lock backend. Build it with [`ZkBackend::connect`] (or [`crate::connect`] for a
/// ready [`lockcore::Locker`]).
///
/// It owns one ZooKeeper session, shared by every lock taken through it; when that session ends
/// (expiry, closed), the next request opens a new one (leases of the old one are reported lost).
pub struct ZkBackend {
    config: ZkConfig,
    current: tokio::sync::Mutex<Arc<Session>>,
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("hosts", &self.config.connect_string)
            .field("namespace", &self.config.namespace)
            .finish()
    }
}

impl ZkBackend {
    /// Parses a `zk://` URL and establishes a session.
    ///
    /// Errors: [`LockError::InvalidUrl`] for a malformed URL or option;
    /// [`LockError::Unavailable`] if no session is established within the connect timeout.
    pub async fn connect(url: &BackendUrl) -> Result<Self> {
        let config = ZkConfig::from_url(url)?;
        let session = open_session(&config).await?;
        Ok(ZkBackend {
            config,
            current: tokio::sync::Mutex::new(session),
        })
    }

    /// The session timeout the server granted to the current session: the TTL of every lease.
    pub async fn session_timeout(&self) -> Duration {
        self.current.lock().await.timeout
    }

    /// The id of the current ZooKeeper session (the `ephemeralOwner` of its nodes).
    pub async fn session_id(&self) -> i64 {
        self.current.lock().await.id
    }

    /// The absolute path of the lock node of `name` (its contenders are its children).
    pub fn lock_path(&self, name: &LockName) -> String {
        layout::lock_path(&self.config.namespace, name)
    }

    /// The current session, replaced by a new one if it has ended.
    async fn session(&self) -> Result<Arc<Session>> {
        let mut current = self.current.lock().await;
        if current.is_terminated() {
            tracing::info!(old = ?*current, "the ZooKeeper session ended; opening a new one");
            *current = open_session(&self.config).await?;
        }
        Ok(current.clone())
    }

    /// Turns a granted contender into a lease: no await from here to the return, so a cancelled
    /// caller either gets the lease or the contender's `Drop` deletes the node.
    fn grant(
        &self,
        session: &Session,
        req: &LockRequest,
        contender: &mut Contender,
        granted: Granted,
    ) -> Result<Lease> {
        let Granted { node, sent } = granted;
        let token = u64::try_from(node.czxid)
            .map_err(|_| LockError::Protocol(format!("node {} has a negative czxid {}", node.path, node.czxid)))?;
        if req.ttl != session.timeout {
            tracing::debug!(requested = ?req.ttl, effective = ?session.timeout, "the lease TTL is the session timeout");
        }
        let lease = Lease {
            name: req.name.clone(),
            kind: req.kind.clone(),
            fencing_token: token,
            ttl: session.timeout,
            holder_id: node.path,
            acquired_at: sent,
            lost: LostSignal::new(),
        };
        session.register(&lease, node.czxid);
        contender.disarm();
        Ok(lease)
    }

    /// One attempt at the head of the queue; `wait` decides whether to queue or withdraw.
    ///
    /// A session that ends or a node that vanishes starts the attempt over (on a new session),
    /// [`MAX_RESTARTS`] times at most; a server that fails is retried with backoff until the
    /// deadline (see [`lockcore::Outage`]), which then answers `Unavailable`, not `Timeout`.
    async fn attempt(&self, req: &LockRequest, wait: bool, deadline: Option<Instant>) -> Result<Option<Lease>> {
        let lock_path = self.lock_path(&req.name);
        let mut outage = Outage::new(deadline, self.config.session_timeout * 2);
        let mut restarts = 0;
        loop {
            let session = match self.session().await {
                Ok(session) => session,
                Err(e) => {
                    outage.failed(e).await?;
                    continue;
                }
            };
            let mut contender = Contender::new(session.clone(), lock_path.clone());
            let outcome = match contender.enqueue().await {
                Ok((children, sent)) if wait => contender.wait_turn(children, sent, deadline).await.map(Some),
                Ok((children, sent)) => match contender.wait_turn(children, sent, Some(Instant::now())).await {
                    Err(Failure::Timeout) => Ok(None),
                    other => other.map(Some),
                },
                Err(f) => Err(f),
            };
            match outcome {
                Ok(Some(granted)) => return self.grant(&session, req, &mut contender, granted).map(Some),
                Ok(None) => {
                    contender.withdraw().await;
                    return Ok(None);
                }
                Err(Failure::Timeout) => {
                    contender.withdraw().await;
                    return Err(LockError::Timeout(Duration::ZERO)); // the Locker reports its own timeout
                }
                Err(Failure::NoAnswer(why)) => {
                    return Err(LockError::Unavailable {
                        message: format!("ZooKeeper: {why}"),
                        source: None,
                    })
                }
                Err(Failure::Fatal(e, what)) => return Err(to_lock_error(what, e)),
                Err(Failure::Restart(why)) => {
                    restarts += 1;
                    tracing::warn!(lock = %req.name, reason = %why, restarts, "starting the lock attempt over");
                    drop(contender); // withdraws whatever is left, in the background
                    let e = LockError::Unavailable {
                        message: format!("ZooKeeper: {why}"),
                        source: None,
                    };
                    if restarts > MAX_RESTARTS {
                        return Err(e);
                    }
                    outage.failed(e).await?;
                }
            }
        }
    }
}

/// A new session with its watch task.
async fn open_session(config: &ZkConfig) -> Result<Arc<Session>> {
    let (session, granted) = Session::connect(config).await?;
    tokio::spawn(watch_held(Arc::downgrade(&session), granted));
    Ok(session)
}

/// Bounds a request by the request timeout: while disconnected, the client holds requests until it
/// reconnects or the session expires (7/5 of the timeout), which is too long to keep a caller.
async fn bounded<T>(
    config: &ZkConfig,
    request: impl std::future::Future<Output = std::result::Result<T, zk::Error>>,
) -> std::result::Result<T, zk::Error> {
    tokio::time::timeout(config.request_timeout, request)
        .await
        .unwrap_or(Err(zk::Error::Timeout))
}

#[async_trait]
impl LockBackend for ZkBackend {
    fn kind(&self) -> &'static str {
        "zk"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        lockcore::unsupported_kind(self.kind(), req)?;
        self.attempt(req, false, None).await
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        lockcore::unsupported_kind(self.kind(), req)?;
        match self.attempt(req, true, deadline).await? {
            Some(lease) => Ok(lease),
            None => Err(LockError::Protocol("a waiting acquire returned no lease".into())),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let session = self.current.lock().await.clone();
        let was_held = session.forget(&lease.holder_id);
        if session.is_terminated() {
            return Err(LockError::not_held(lease.name.as_str()));
        }
        // A lease declared lost is not ours any more, even if its node is still there: the node is
        // deleted all the same, but the answer is NotHeld.
        let lost = lease.lost.is_lost();
        match bounded(&self.config, session.client.delete(&lease.holder_id, None)).await {
            Ok(()) if !lost => Ok(()),
            Ok(()) | Err(zk::Error::NoNode) => Err(LockError::not_held(lease.name.as_str())),
            Err(e) => {
                if was_held || lost {
                    // Let the session's monitor delete it as soon as it can.
                    session.register_for_removal(lease);
                }
                if lost {
                    Err(LockError::not_held(lease.name.as_str()))
                } else {
                    Err(to_lock_error("deleting the lock node", e))
                }
            }
        }
    }

    /// The URL's `request_timeout`.
    fn request_timeout(&self) -> Duration {
        self.config.request_timeout
    }

    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        let session = self.current.lock().await.clone();
        renew_all(&session, &self.config.namespace, leases).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        let session = self.session().await?;
        let lock_path = self.lock_path(name);
        for _ in 0..10 {
            let children = match bounded(&self.config, session.client.list_children(&lock_path)).await {
                Ok(children) => layout::sorted(children),
                Err(zk::Error::NoNode) => return Ok(LockInfo::default()),
                Err(e) => return Err(to_lock_error("listing the lock's contenders", e)),
            };
            let Some(first) = children.first() else {
                return Ok(LockInfo::default());
            };
            let holder_id = layout::child_path(&lock_path, first);
            match bounded(&self.config, session.client.check_stat(&holder_id)).await {
                Ok(Some(stat)) => {
                    let holder = HolderInfo {
                        holder_id,
                        fencing_token: u64::try_from(stat.czxid).ok(),
                        ttl_remaining: None,
                    };
                    return Ok(LockInfo {
                        holder: Some(holder),
                        waiters: children.len() - 1,
                    });
                }
                Ok(None) => continue, // the holder just left; look again
                Err(e) => return Err(to_lock_error("reading the holder's node", e)),
            }
        }
        Err(LockError::Protocol(format!(
            "the holder of {lock_path} kept changing while inspecting"
        )))
    }
}
