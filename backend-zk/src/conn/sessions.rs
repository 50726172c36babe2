//! The backend's current ZooKeeper session, replaced by a new one when it ends — shared by the
//! backend's calls and the tasks that observe elections, which outlive any one call.

use std::sync::Arc;

use locksmith_core::Result;
use zookeeper_client as zk;

use crate::config::ZkConfig;
use crate::conn::session::Session;
use crate::wake::held::watch_held;

/// The configuration and the current session of one backend.
pub(crate) struct Sessions {
    /// The URL's settings.
    pub(crate) config: ZkConfig,
    current: tokio::sync::Mutex<Arc<Session>>,
    /// Set by [`Sessions::shutdown`]: no new session is opened.
    closed: std::sync::atomic::AtomicBool,
}

impl Sessions {
    /// Establishes the first session (see [`Session::connect`]).
    pub(crate) async fn connect(config: ZkConfig) -> Result<Self> {
        let session = open_session(&config).await?;
        Ok(Sessions {
            config,
            current: tokio::sync::Mutex::new(session),
            closed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The current session as it is, even if it has ended (for release and renewal, which must
    /// not open a new session for leases of an old one).
    pub(crate) async fn current(&self) -> Arc<Session> {
        self.current.lock().await.clone()
    }

    /// The current session, replaced by a new one if it has ended.
    pub(crate) async fn session(&self) -> Result<Arc<Session>> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(locksmith_core::LockError::Closed);
        }
        let mut current = self.current.lock().await;
        if current.is_terminated() {
            tracing::info!(old = ?*current, "the ZooKeeper session ended; opening a new one");
            *current = open_session(&self.config).await?;
        }
        Ok(current.clone())
    }

    /// For `Locker::shutdown`: opens no new session, and deletes every node the current one still
    /// has (see [`Session::delete_everything`]; what it could not delete, the session's monitor
    /// deletes once ZooKeeper answers again). The session itself ends when the backend is dropped
    /// (the client then sends `CloseSession`) or the process exits.
    pub(crate) async fn shutdown(&self) -> Result<()> {
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        let session = self.current().await;
        if session.is_terminated() {
            return Ok(());
        }
        session.delete_everything(self.config.request_timeout).await
    }

    /// Bounds a request by the request timeout: while disconnected, the client holds requests
    /// until it reconnects or the session expires (7/5 of the timeout), which is too long to keep
    /// a caller.
    pub(crate) async fn bounded<T>(
        &self,
        request: impl std::future::Future<Output = std::result::Result<T, zk::Error>>,
    ) -> std::result::Result<T, zk::Error> {
        locksmith_core::metrics::round_trip();
        tokio::time::timeout(self.config.request_timeout, request)
            .await
            .unwrap_or(Err(zk::Error::Timeout))
    }
}

impl Sessions {
    /// [`Sessions::bounded`] for a `multi`, whose error says which operation failed.
    pub(crate) async fn bounded_multi<T>(
        &self,
        request: impl std::future::Future<Output = std::result::Result<T, zk::MultiWriteError>>,
    ) -> std::result::Result<T, zk::MultiWriteError> {
        locksmith_core::metrics::round_trip();
        tokio::time::timeout(self.config.request_timeout, request)
            .await
            .unwrap_or(Err(zk::MultiWriteError::RequestFailed {
                source: zk::Error::Timeout,
            }))
    }
}

/// A new session with its watch task.
async fn open_session(config: &ZkConfig) -> Result<Arc<Session>> {
    let (session, granted) = Session::connect(config).await?;
    tokio::spawn(watch_held(Arc::downgrade(&session), granted));
    Ok(session)
}
