//! The one connection of a locker: opened again when it was lost (LISTENing again, and telling
//! every waiter to take a step), with the statements prepared on it ([`Statements`]), shared by
//! the steps (a transaction each, one at a time) and the renewals and heartbeats, which go first
//! ([`Link::urgent`]).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{watch, Mutex, Notify, OwnedMutexGuard};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use locksmith_core::driver::in_caller::InCaller;
use locksmith_core::{LockError, Result};

use super::{abandon, connect_for_steps, Connected, Statements};
use crate::config::Config;
use crate::error::{pg_error, timeout};
use crate::wake::Listener;

/// The connection of a [`Link`], held by one user at a time (`None` after it was lost, until the
/// next use opens a new one). Owned, so that a request holding it can move into a task of its own
/// ([`Link::in_caller`]).
pub(crate) type ClientGuard = OwnedMutexGuard<Option<Connected>>;

/// A connection (`None` after it was lost, until the next use opens a new one) and its prepared
/// statements. Held by one user at a time.
#[derive(Debug)]
pub(crate) struct Link {
    client: Arc<Mutex<Option<Connected>>>,
    /// The requests run in their callers' tasks ([`Link::in_caller`]).
    in_caller: InCaller,
    /// Where its notifications go, when the locker LISTENs on it (not behind a transaction
    /// pooler: `crate::wake`).
    listener: Option<Listener>,
    /// How many renewals and heartbeats wait for the connection ([`Link::urgent`]).
    urgent: AtomicUsize,
    /// Told when one of them got it.
    urgent_served: Notify,
    /// The statements prepared on the current connection.
    pub statements: Statements,
}

impl Link {
    /// A link over `client` (opened with `listener`, if any), which opens a new connection at
    /// its first use after `client` is lost.
    pub fn new(client: Connected, listener: Option<Listener>, config: &Config) -> Link {
        let statements = Statements::new(config);
        statements.connected(&client);
        Link {
            client: Arc::new(Mutex::new(Some(client))),
            in_caller: InCaller::default(),
            listener,
            urgent: AtomicUsize::new(0),
            urgent_served: Notify::new(),
            statements,
        }
    }

    /// The connection, opened again if it was lost. Renewals and heartbeats waiting for it
    /// ([`Link::urgent`]) get it first.
    pub async fn client(&self, config: &Config) -> Result<ClientGuard> {
        loop {
            let served = self.urgent_served.notified();
            tokio::pin!(served);
            served.as_mut().enable();
            if self.urgent.load(Ordering::Acquire) == 0 {
                let guard = self.lock().await;
                if self.urgent.load(Ordering::Acquire) == 0 {
                    return self.open(guard, config).await;
                }
            }
            served.await;
        }
    }

    /// The connection, as [`Link::client`], for a renewal or a heartbeat: before the steps that
    /// wait for it (after the one in flight), so that a backlog of this locker's steps never
    /// delays a lease past its TTL.
    ///
    /// # Cancel safety
    ///
    /// A renewal given up on while it waits (the watchdog's deadline) no longer counts: the
    /// steps go on.
    async fn urgent(&self, config: &Config) -> Result<ClientGuard> {
        let guard = {
            let _waiting = Urgent::new(self);
            self.lock().await
        };
        self.open(guard, config).await
    }

    /// `guard`, with a new connection in it if the last one was lost (its statements forgotten;
    /// listening again, and every waiter told to take a step: a notification may have been
    /// missed meanwhile).
    async fn open(&self, mut guard: ClientGuard, config: &Config) -> Result<ClientGuard> {
        if guard.as_ref().is_none_or(|c| c.is_closed()) {
            abandon(&mut guard);
            self.statements.clear();
            // Boxed: opening a connection (TLS, login, the session's settings) is a large future,
            // and a request carries its wait for the connection, moved whole into a box of its own
            // at every request (`locksmith_core::driver::in_caller`; MySQL's steps likewise).
            let connected = Box::pin(connect_for_steps(config, self.listener.as_ref())).await?;
            self.statements.connected(&connected);
            *guard = Some(connected);
            if let Some(hub) = self.listener.as_ref().and_then(|l| l.hub.upgrade()) {
                hub.wake_all();
            }
        }
        Ok(guard)
    }

    /// What ends when the current connection does (`None`: none is open now).
    pub async fn ended(&self) -> Option<watch::Receiver<()>> {
        let guard = self.lock().await;
        guard.as_ref().filter(|c| !c.is_closed()).map(|c| c.ended.clone())
    }

    /// The connection's slot, as it is: waited for in turn, handing off every 20 ms
    /// (`HAND_OFF_AFTER`) the requests whose callers stopped polling them ([`Link::in_caller`]),
    /// so that no caller holds up this locker's other requests, renewals included, for longer
    /// than that.
    async fn lock(&self) -> ClientGuard {
        self.in_caller.wait(self.client.clone().lock_owned()).await
    }

    /// Runs a request of this link in its caller's task: waits for `connection` (the link's
    /// connection, taken with [`Link::client`] or [`Link::request`]), then runs `request` with it
    /// to its end. Handed off into a task of its own if its caller stops polling it while another
    /// request waits for the connection (`locksmith_core::driver::in_caller`).
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits for the connection, nothing runs; dropped after, `request` runs to
    /// its end in a task of its own.
    pub async fn in_caller<C, T, F>(
        &self,
        connection: impl Future<Output = Result<C>> + Send + 'static,
        request: impl FnOnce(C) -> F + Send + 'static,
    ) -> Result<T>
    where
        C: Send + 'static,
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        self.in_caller.run(connection, request).await
    }

    /// The connection, as [`Link::urgent`], for one request, `what` (for the logs): unless the
    /// request is answered ([`InFlight::answered`]), the connection is dropped with the returned
    /// value (the request timed out, or its future was dropped), and the next use opens a new
    /// one. A connection that stops answering without closing (a flow a NAT or firewall
    /// dropped) would otherwise keep every later request waiting behind the unanswered one.
    pub async fn request(&self, config: &Config, what: &'static str) -> Result<InFlight> {
        Ok(InFlight {
            guard: self.urgent(config).await?,
            what,
            answered: false,
        })
    }
}

impl Link {
    /// Runs the renewal or heartbeat `sql` (a write, with custom plans: [`Statements::write`])
    /// with `params` as one request on this link's connection, before any waiting step
    /// ([`Link::request`]), within the request timeout: its rows. `what` names the request in a
    /// timeout's error and in the logs, `doing` the failure the server answered.
    pub async fn query_within(
        &self,
        config: &Config,
        what: &'static str,
        doing: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let request = self.request(config, what).await?;
        self.query_on(request, config, what, doing, sql, params).await
    }

    /// [`Link::query_within`] on the connection of `request`.
    pub async fn query_on(
        &self,
        request: InFlight,
        config: &Config,
        what: &'static str,
        doing: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let limit = config.request_timeout;
        let run = self.statements.write(request.client()?, sql, params, true);
        let rows = tokio::time::timeout(limit, run)
            .await
            .map_err(|_| timeout(what, limit))?;
        request.answered();
        rows.map_err(|e| pg_error(doing, e))
    }

    /// Runs the read `sql` on the connection in `guard` (taken in turn with the steps) as
    /// [`Link::query_within`] does, except that a read whose future is dropped keeps the
    /// connection (the connection's task reads its answer and drops it): for reads that callers
    /// give up on routinely (a waiter granted during its sweep, `inspect` under a caller's
    /// timeout), where dropping the connection each time would open a new one for every such
    /// read. One that got no answer within the request timeout drops it.
    pub async fn read_within(
        &self,
        mut guard: ClientGuard,
        config: &Config,
        what: &'static str,
        doing: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let limit = config.request_timeout;
        let answer = {
            let client = guard.as_deref().ok_or(LockError::Closed)?;
            tokio::time::timeout(limit, self.statements.query(client, sql, params)).await
        };
        match answer {
            Ok(rows) => rows.map_err(|e| pg_error(doing, e)),
            Err(_) => {
                tracing::debug!(
                    request = what,
                    "postgres: a read got no answer; dropping its connection"
                );
                abandon(&mut guard);
                Err(timeout(what, limit))
            }
        }
    }
}

/// A renewal or heartbeat waiting for a [`Link`]'s connection ([`Link::urgent`]): counted while
/// it lives, and the steps held back for it told when it ends (it got the connection, or it was
/// given up on).
struct Urgent<'a>(&'a Link);

impl<'a> Urgent<'a> {
    fn new(link: &'a Link) -> Urgent<'a> {
        link.urgent.fetch_add(1, Ordering::AcqRel);
        Urgent(link)
    }
}

impl Drop for Urgent<'_> {
    fn drop(&mut self) {
        self.0.urgent.fetch_sub(1, Ordering::AcqRel);
        self.0.urgent_served.notify_waiters();
    }
}

/// One request on a [`Link`]'s connection ([`Link::request`]): drops the connection when
/// dropped before it was answered.
#[derive(Debug)]
pub(crate) struct InFlight {
    guard: ClientGuard,
    /// The request, for the logs.
    what: &'static str,
    /// Whether the server answered it (with rows or an error).
    answered: bool,
}

impl InFlight {
    /// The connection.
    pub fn client(&self) -> Result<&Client> {
        self.guard.as_deref().ok_or(LockError::Closed)
    }

    /// The server answered: the connection is kept.
    pub fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.answered && self.guard.is_some() {
            tracing::debug!(
                request = self.what,
                "postgres: a request got no answer; dropping its connection"
            );
            abandon(&mut self.guard);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Link;
    use crate::config::Config;

    /// The size of what `f` returns, without calling it.
    fn size_of_return<F, R>(_: F) -> usize
    where
        F: Fn(&'static Link, &'static Config) -> R,
    {
        std::mem::size_of::<R>()
    }

    /// A request's wait for the connection is small: it is moved whole into the request's box at
    /// every request (`locksmith_core::driver::in_caller`). With the opening of a connection
    /// inline (4,768 bytes in a test build), it nearly doubled an uncontended cycle's client
    /// instructions.
    #[test]
    fn a_wait_for_the_connection_is_small() {
        let size = size_of_return(Link::client);
        assert!(size <= 1024, "Link::client's future is {size} bytes");
    }
}
