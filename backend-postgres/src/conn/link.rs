//! One connection of a locker: opened again when it was lost, with the statements prepared on it.

use std::collections::HashMap;

use tokio::sync::{Mutex, MutexGuard};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, GenericClient, Row, Statement};

use locksmith_core::{LockError, Result};

use super::{abandon, connect, connect_for_steps, Connected};
use crate::config::Config;
use crate::error::{pg_error, timeout};

/// A connection (`None` after it was lost, until the next use opens a new one) and its prepared
/// statements. Held by one user at a time.
#[derive(Debug)]
pub(crate) struct Link {
    client: Mutex<Option<Connected>>,
    /// Whether it carries the steps (`super::connect_for_steps`), or the leases.
    for_steps: bool,
    /// The statements prepared on the current connection.
    pub statements: Statements,
}

impl Link {
    /// A link over `client`, or one that connects at its first use; `for_steps`: see
    /// [`connect_for_steps`].
    pub fn new(client: Option<Connected>, for_steps: bool) -> Link {
        Link {
            client: Mutex::new(client),
            for_steps,
            statements: Statements::default(),
        }
    }

    /// The connection, opened again if it was lost (its statements forgotten then).
    pub async fn client(&self, config: &Config) -> Result<MutexGuard<'_, Option<Connected>>> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(|c| c.is_closed()) {
            abandon(&mut guard);
            self.statements.clear();
            *guard = Some(match self.for_steps {
                true => connect_for_steps(config).await?,
                false => connect(config).await?,
            });
        }
        Ok(guard)
    }

    /// The connection, as [`Link::client`], for one request, `what` (for the logs): unless the
    /// request is answered ([`InFlight::answered`]), the connection is dropped with the returned
    /// value (the request timed out, or its future was dropped), and the next use opens a new
    /// one. A connection that stops answering without closing (a flow a NAT or firewall
    /// dropped) would otherwise keep every later request waiting behind the unanswered one.
    async fn request(&self, config: &Config, what: &'static str) -> Result<InFlight<'_>> {
        Ok(InFlight {
            guard: self.client(config).await?,
            what,
            answered: false,
        })
    }
}

impl Link {
    /// Runs `sql` (prepared once per connection) with `params` as one request on this link's
    /// connection ([`Link::request`]), within the request timeout: its rows. `what` names the
    /// request in a timeout's error and in the logs, `doing` the failure the server answered.
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
        let run = self.query_on(request.client()?, sql, params);
        let rows = tokio::time::timeout(limit, run)
            .await
            .map_err(|_| timeout(what, limit))?;
        request.answered();
        rows.map_err(|e| pg_error(doing, e))
    }

    /// `sql`, prepared once per connection, run on `client` with `params`.
    async fn query_on(
        &self,
        client: &Client,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.statements.get(client, sql).await?;
        client.query(&statement, params).await
    }

    /// Runs the read `sql` as [`Link::query_within`] does, except that a read whose future is
    /// dropped keeps the connection (the connection's task reads its answer and drops it): for
    /// reads that callers give up on routinely (a waiter granted during its sweep, `inspect`
    /// under a caller's timeout), where dropping the connection each time would open a new one
    /// for every such read. One that got no answer within the request timeout drops it.
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
            tokio::time::timeout(limit, self.query_on(client, sql, params)).await
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

/// The statements prepared on one connection, by text; emptied when it is replaced.
#[derive(Debug, Default)]
pub(crate) struct Statements(std::sync::Mutex<HashMap<String, Statement>>);

impl Statements {
    /// `sql` prepared on `client`'s connection: the one prepared before, or prepared now.
    pub async fn get<C: GenericClient>(
        &self,
        client: &C,
        sql: &str,
    ) -> std::result::Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.lock().get(sql) {
            return Ok(statement.clone());
        }
        locksmith_core::metrics::round_trip();
        let statement = client.prepare(sql).await?;
        self.lock().insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Forgets them all (a new connection has none).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Statement>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
