//! One connection of a locker: opened again when it was lost, with the statements prepared on it
//! ([`Statements`]: named and prepared once, or, behind a transaction pooler, unnamed).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{Mutex, MutexGuard};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, GenericClient, Row, SimpleQueryMessage, Statement, Transaction};

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
    pub fn new(client: Option<Connected>, for_steps: bool, config: &Config) -> Link {
        Link {
            client: Mutex::new(client),
            for_steps,
            statements: Statements::new(config),
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
    /// Runs the write `sql` (a transaction of its own: [`Statements::write`]) with `params` as
    /// one request on this link's connection ([`Link::request`]), within the request timeout:
    /// its rows. `what` names the request in a timeout's error and in the logs, `doing` the
    /// failure the server answered.
    pub async fn query_within(
        &self,
        config: &Config,
        what: &'static str,
        doing: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let limit = config.request_timeout;
        let mut request = self.request(config, what).await?;
        let run = self.statements.write(request.client()?, sql, params);
        let rows = tokio::time::timeout(limit, run)
            .await
            .map_err(|_| timeout(what, limit))?;
        request.answered();
        rows.map_err(|e| pg_error(doing, e))
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
    pub fn client(&mut self) -> Result<&mut Client> {
        self.guard.as_deref_mut().ok_or(LockError::Closed)
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

/// The parameters of a statement.
type Params<'p> = [&'p (dyn ToSql + Sync)];

/// How one statement runs on a connection ([`Statements`]).
#[derive(Clone)]
enum Prepared {
    /// Prepared once, by name, and run by that name.
    Named(Statement),
    /// Sent whole with every run, unnamed, with these parameter types.
    Unnamed(Arc<Vec<Type>>),
}

/// How the statements run on one connection, by text; emptied when it is replaced.
///
/// On a session of our own (the server, or a session-mode pool), each is prepared once, named,
/// and run by that name: one round trip a run, planned once. Behind a transaction pooler
/// ([`Config::pooled`]) a named statement would stay on whichever server session prepared it,
/// where another client's statement of the same name collides with it (`prepared statement "s1"
/// already exists`), while this client's next run lands on another session (`bind message
/// supplies 1 parameters, but prepared statement "s20" requires 4`). There each statement's
/// parameter types are learned once ([`learn_types`]: one simple query that prepares, reads and
/// deallocates it on one server session) and every run sends it unnamed with them: parse, bind
/// and execute in one message, which a pooler keeps on one server session. The session settings
/// of [`super::session_settings`] are then set by every transaction instead
/// ([`Statements::begin`]).
pub(crate) struct Statements {
    by_text: std::sync::Mutex<HashMap<String, Prepared>>,
    /// Behind a transaction pooler: what every transaction sets first
    /// ([`super::transaction_settings`]).
    per_transaction: Option<String>,
}

impl std::fmt::Debug for Statements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Statements")
            .field("pooled", &self.per_transaction.is_some())
            .finish_non_exhaustive()
    }
}

impl Statements {
    /// None yet, for a connection made with `config`.
    pub fn new(config: &Config) -> Statements {
        Statements {
            by_text: std::sync::Mutex::default(),
            per_transaction: config.pooled().then(|| super::transaction_settings(config)),
        }
    }

    /// How `sql` runs on `client`'s connection: as it was learned before, or learned now.
    async fn get<C: GenericClient + Sync>(
        &self,
        client: &C,
        sql: &str,
    ) -> std::result::Result<Prepared, tokio_postgres::Error> {
        if let Some(prepared) = self.lock().get(sql) {
            return Ok(prepared.clone());
        }
        locksmith_core::metrics::round_trip();
        let prepared = match self.per_transaction {
            None => Prepared::Named(client.prepare(sql).await?),
            Some(_) => Prepared::Unnamed(Arc::new(learn_types(client, sql).await?)),
        };
        self.lock().insert(sql.to_owned(), prepared.clone());
        Ok(prepared)
    }

    /// Runs `sql` on `client` with `params`: its rows.
    pub async fn query<C: GenericClient + Sync>(
        &self,
        client: &C,
        sql: &str,
        params: &Params<'_>,
    ) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
        match self.get(client, sql).await? {
            Prepared::Named(statement) => client.query(&statement, params).await,
            Prepared::Unnamed(types) => client.query_typed(sql, &typed(params, &types)).await,
        }
    }

    /// Runs `sql` on `client` with `params`: the number of rows it changed.
    pub async fn execute<C: GenericClient + Sync>(
        &self,
        client: &C,
        sql: &str,
        params: &Params<'_>,
    ) -> std::result::Result<u64, tokio_postgres::Error> {
        match self.get(client, sql).await? {
            Prepared::Named(statement) => client.execute(&statement, params).await,
            Prepared::Unnamed(types) => client.execute_typed(sql, &typed(params, &types)).await,
        }
    }

    /// Runs `sql`, which returns one row, on `client` with `params`.
    pub async fn query_one<C: GenericClient + Sync>(
        &self,
        client: &C,
        sql: &str,
        params: &Params<'_>,
    ) -> std::result::Result<Row, tokio_postgres::Error> {
        match self.get(client, sql).await? {
            Prepared::Named(statement) => client.query_one(&statement, params).await,
            Prepared::Unnamed(types) => client.query_typed_one(sql, &typed(params, &types)).await,
        }
    }

    /// Runs `sql`, which returns at most one row, on `client` with `params`.
    pub async fn query_opt<C: GenericClient + Sync>(
        &self,
        client: &C,
        sql: &str,
        params: &Params<'_>,
    ) -> std::result::Result<Option<Row>, tokio_postgres::Error> {
        match self.get(client, sql).await? {
            Prepared::Named(statement) => client.query_opt(&statement, params).await,
            Prepared::Unnamed(types) => client.query_typed_opt(sql, &typed(params, &types)).await,
        }
    }

    /// Starts a transaction on `client`: behind a transaction pooler, its first statement sets
    /// what a session of ours sets once ([`super::transaction_settings`]).
    pub async fn begin<'c>(
        &self,
        client: &'c mut Client,
    ) -> std::result::Result<Transaction<'c>, tokio_postgres::Error> {
        let tx = client.transaction().await?;
        if let Some(settings) = &self.per_transaction {
            locksmith_core::metrics::round_trip();
            tx.batch_execute(settings).await?;
        }
        Ok(tx)
    }

    /// Runs the write `sql` on `client` with `params`, as a transaction of its own: a single
    /// statement on a session of ours; behind a transaction pooler, in a transaction started by
    /// [`Statements::begin`] (so that its commit is as durable as on a session of ours). Its
    /// rows.
    pub async fn write(
        &self,
        client: &mut Client,
        sql: &str,
        params: &Params<'_>,
    ) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
        if self.per_transaction.is_none() {
            return self.query(&*client, sql, params).await;
        }
        let tx = self.begin(client).await?;
        let rows = self.query(&tx, sql, params).await?;
        locksmith_core::metrics::round_trip();
        tx.commit().await?;
        Ok(rows)
    }

    /// Forgets them all (a new connection has none).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Prepared>> {
        self.by_text.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `params` paired with their `types`.
fn typed<'p>(params: &Params<'p>, types: &[Type]) -> Vec<(&'p (dyn ToSql + Sync), Type)> {
    params.iter().copied().zip(types.iter().cloned()).collect()
}

/// The parameter types of `sql`, as the server infers them, in one simple query that a pooler
/// runs on one server session: `PREPARE` under a name of its own, read the types from
/// `pg_prepared_statements`, `DEALLOCATE`. Nothing is left on the session.
async fn learn_types<C: GenericClient + Sync>(
    client: &C,
    sql: &str,
) -> std::result::Result<Vec<Type>, tokio_postgres::Error> {
    let name = format!("locksmith_types_{:016x}", rand::random::<u64>());
    let text = format!(
        "PREPARE {name} AS {sql}; \
         SELECT parameter_types::oid[]::text FROM pg_prepared_statements WHERE name = '{name}'; \
         DEALLOCATE {name}"
    );
    let answer = client.simple_query(&text).await?;
    let oids = answer.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    });
    let oids = oids.unwrap_or_default();
    let oids = oids.trim_start_matches('{').trim_end_matches('}');
    // A type this crate does not know (none of its statements has one) fails the run that
    // uses it, with tokio-postgres's "cannot convert" error.
    Ok(oids
        .split(',')
        .filter(|oid| !oid.is_empty())
        .map(|oid| oid.parse().ok().and_then(Type::from_oid).unwrap_or(Type::UNKNOWN))
        .collect())
}
