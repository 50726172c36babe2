//! The one connection of a locker: opened again when it was lost (LISTENing again, and telling
//! every waiter to take a step), with the statements prepared on it ([`Statements`]), shared by
//! the steps (a transaction each, one at a time) and the renewals and heartbeats, which go first
//! ([`Link::urgent`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{watch, Mutex, MutexGuard, Notify};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use locksmith_core::{LockError, Result};

use super::{abandon, connect_for_steps, Connected, Statements};
use crate::config::Config;
use crate::error::{pg_error, timeout};
use crate::wake::Listener;

/// A connection (`None` after it was lost, until the next use opens a new one) and its prepared
/// statements. Held by one user at a time.
#[derive(Debug)]
pub(crate) struct Link {
    client: Mutex<Option<Connected>>,
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
            client: Mutex::new(Some(client)),
            listener,
            urgent: AtomicUsize::new(0),
            urgent_served: Notify::new(),
            statements,
        }
    }

    /// The connection, opened again if it was lost. Renewals and heartbeats waiting for it
    /// ([`Link::urgent`]) get it first.
    pub async fn client(&self, config: &Config) -> Result<MutexGuard<'_, Option<Connected>>> {
        loop {
            let served = self.urgent_served.notified();
            tokio::pin!(served);
            served.as_mut().enable();
            if self.urgent.load(Ordering::Acquire) == 0 {
                let guard = self.client.lock().await;
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
    async fn urgent(&self, config: &Config) -> Result<MutexGuard<'_, Option<Connected>>> {
        let guard = {
            let _waiting = Urgent::new(self);
            self.client.lock().await
        };
        self.open(guard, config).await
    }

    /// `guard`, with a new connection in it if the last one was lost (its statements forgotten;
    /// listening again, and every waiter told to take a step: a notification may have been
    /// missed meanwhile).
    async fn open<'a>(
        &'a self,
        mut guard: MutexGuard<'a, Option<Connected>>,
        config: &Config,
    ) -> Result<MutexGuard<'a, Option<Connected>>> {
        if guard.as_ref().is_none_or(|c| c.is_closed()) {
            abandon(&mut guard);
            self.statements.clear();
            let connected = connect_for_steps(config, self.listener.as_ref()).await?;
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
        let guard = self.client.lock().await;
        guard.as_ref().filter(|c| !c.is_closed()).map(|c| c.ended.clone())
    }

    /// The connection, as [`Link::urgent`], for one request, `what` (for the logs): unless the
    /// request is answered ([`InFlight::answered`]), the connection is dropped with the returned
    /// value (the request timed out, or its future was dropped), and the next use opens a new
    /// one. A connection that stops answering without closing (a flow a NAT or firewall
    /// dropped) would otherwise keep every later request waiting behind the unanswered one.
    async fn request(&self, config: &Config, what: &'static str) -> Result<InFlight<'_>> {
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
        let limit = config.request_timeout;
        let request = self.request(config, what).await?;
        let run = self.statements.write(request.client()?, sql, params, true);
        let rows = tokio::time::timeout(limit, run)
            .await
            .map_err(|_| timeout(what, limit))?;
        request.answered();
        rows.map_err(|e| pg_error(doing, e))
    }

    /// Runs the read `sql` as [`Link::query_within`] does (but in turn with the steps), except
    /// that a read whose future is dropped keeps the connection (the connection's task reads its
    /// answer and drops it): for reads that callers give up on routinely (a waiter granted
    /// during its sweep, `inspect` under a caller's timeout), where dropping the connection each
    /// time would open a new one for every such read. One that got no answer within the request
    /// timeout drops it.
    pub async fn read_within(
        &self,
        config: &Config,
        what: &'static str,
        doing: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let limit = config.request_timeout;
        let mut guard = self.client(config).await?;
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
pub(crate) struct InFlight<'a> {
    guard: MutexGuard<'a, Option<Connected>>,
    /// The request, for the logs.
    what: &'static str,
    /// Whether the server answered it (with rows or an error).
    answered: bool,
}

impl InFlight<'_> {
    /// The connection.
    pub fn client(&self) -> Result<&Client> {
        self.guard.as_deref().ok_or(LockError::Closed)
    }

    /// The server answered: the connection is kept.
    pub fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for InFlight<'_> {
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
