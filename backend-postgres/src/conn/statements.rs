//! How statements run on one connection: named and prepared once, or, behind a transaction
//! pooler, unnamed ([`Statements`]).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use locksmith_core::driver::fast_hash::FastHasher;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, GenericClient, Row, Statement, Transaction};

use crate::config::Config;

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

/// A hasher for the statements' texts: they are ours, ~0.7 KB each, and looked up on every run
/// (SipHash cost ~3 k instructions a lookup, a hash of every byte ~0.4 k). It hashes a text's
/// length and its first and last 64 bytes ([`locksmith_core::driver::fast_hash`]), which tell our
/// statements apart; the map still compares equal-hash texts whole.
#[derive(Default)]
struct TextHasher(FastHasher);

impl Hasher for TextHasher {
    fn write(&mut self, bytes: &[u8]) {
        const SAMPLE: usize = 64;
        self.0.write_usize(bytes.len());
        if bytes.len() <= 2 * SAMPLE {
            self.0.write(bytes);
        } else {
            self.0.write(&bytes[..SAMPLE]);
            self.0.write(&bytes[bytes.len() - SAMPLE..]);
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.0.write_u8(n);
    }

    fn finish(&self) -> u64 {
        self.0.finish()
    }
}

/// The statements of a connection by their text ([`TextHasher`]).
type ByText = HashMap<String, Prepared, BuildHasherDefault<TextHasher>>;

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
    by_text: std::sync::Mutex<ByText>,
    /// Behind a transaction pooler: what every transaction sets first
    /// ([`super::transaction_settings`]).
    per_transaction: Option<String>,
    /// Whether the current connection plans every statement once (`plan_cache_mode =
    /// force_generic_plan`, [`super::connect_for_steps`]): a renewal then asks for custom plans
    /// ([`Statements::write`]).
    generic_plans: AtomicBool,
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
            generic_plans: AtomicBool::new(false),
        }
    }

    /// `connected` is the connection now (the statements were forgotten before).
    pub fn connected(&self, connected: &super::Connected) {
        self.generic_plans.store(connected.generic_plans, Ordering::Release);
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
        let prepared = self.get(client, sql).await?;
        self.run(client, &prepared, sql, params).await
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

    /// Runs the write `sql` on `client` with `params` as a transaction of its own, in one round
    /// trip: its rows. On a session of ours, a single statement; behind a transaction pooler,
    /// `BEGIN` with the settings of [`Statements::begin`], the statement and `COMMIT`, sent at
    /// once (so that its commit is as durable as on a session of ours). `custom_plans`: planned
    /// for its parameters even where the session plans every statement once (a renewal joins a
    /// whole array of ids, whose generic plan, which cannot know the array's size, loops over
    /// the array for every lease of the locker: over a second for 10,000 leases).
    ///
    /// The three requests are sent before any answer comes, so a caller that gives up on the
    /// answer leaves the whole transaction to run, never half of it.
    pub async fn write(
        &self,
        client: &Client,
        sql: &str,
        params: &Params<'_>,
        custom_plans: bool,
    ) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
        let custom_plans = custom_plans && self.generic_plans.load(Ordering::Acquire);
        let begin = match (&self.per_transaction, custom_plans) {
            (None, false) => return self.query(client, sql, params).await,
            (None, true) => include_str!("../sql/begin_custom_plans.sql").to_owned(),
            (Some(settings), _) => include_str!("../sql/begin_with.sql").replace("{settings}", settings),
        };
        // Prepared (or its types learned) first: what follows must go out in order, at once.
        let prepared = self.get(client, sql).await?;
        let (_, rows, _) = futures_util::future::try_join3(
            client.batch_execute(&begin),
            self.run(client, &prepared, sql, params),
            client.batch_execute(include_str!("../sql/commit.sql")),
        )
        .await?;
        Ok(rows)
    }

    /// Runs `prepared`, `sql` as [`Statements::get`] made it, with `params`. Sent at its first
    /// poll.
    async fn run<C: GenericClient + Sync>(
        &self,
        client: &C,
        prepared: &Prepared,
        sql: &str,
        params: &Params<'_>,
    ) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
        match prepared {
            Prepared::Named(statement) => client.query(statement, params).await,
            Prepared::Unnamed(types) => client.query_typed(sql, &typed(params, types)).await,
        }
    }

    /// Forgets them all (a new connection has none).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ByText> {
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
    let text = include_str!("../sql/learn_types.sql")
        .replace("{sql}", sql.trim_end())
        .replace("{name}", &name);
    let oids = super::first_value(&client.simple_query(&text).await?).unwrap_or_default();
    let oids = oids.trim_start_matches('{').trim_end_matches('}');
    // A type this crate does not know (none of its statements has one) fails the run that
    // uses it, with tokio-postgres's "cannot convert" error.
    Ok(oids
        .split(',')
        .filter(|oid| !oid.is_empty())
        .map(|oid| oid.parse().ok().and_then(Type::from_oid).unwrap_or(Type::UNKNOWN))
        .collect())
}
