//! The harness of the PostgreSQL backend: every harness a schema of its own on the server of
//! `LOCKSMITH_TEST_POSTGRES` (so tests never see each other's rows), every locker a new
//! `connect` to it (as a separate process would).

use std::time::Duration;

use locksmith_core::conformance::Harness;
use locksmith_core::driver::{async_trait, BackendUrl, LockName};
use locksmith_core::{Family, Locker};
use locksmith_postgres::PgBackend;

/// The test server's URL (`scripts/backends up` exports it).
pub fn server_url() -> String {
    std::env::var("LOCKSMITH_TEST_POSTGRES")
        .expect("LOCKSMITH_TEST_POSTGRES is not set: run `eval \"$(scripts/backends up single)\"` first")
}

/// A schema of its own.
pub struct PgHarness {
    pub url: String,
    /// The schema (`schema=` of [`PgHarness::url`]), for SQL run as the owner.
    pub schema: String,
    /// A backend of the harness's own, to read and delete rows with.
    pub look: PgBackend,
}

impl PgHarness {
    pub async fn plain() -> PgHarness {
        PgHarness::at(server_url()).await
    }

    /// A schema of its own on the server of `base` (a `postgres://` URL).
    pub async fn at(base: String) -> PgHarness {
        let schema = format!("t_{:016x}", rand::random::<u64>());
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}schema={schema}");
        let look = PgBackend::connect(&BackendUrl::parse(&url).unwrap()).await.unwrap();
        PgHarness { url, schema, look }
    }
}

/// The URL of the test server's role without rights of its own (`scripts/backends up` exports it).
pub fn app_url() -> String {
    std::env::var("LOCKSMITH_TEST_POSTGRES_APP")
        .expect("LOCKSMITH_TEST_POSTGRES_APP is not set: run `eval \"$(scripts/backends up single)\"` first")
}

/// Runs `sql` (one or more statements) as the test database's owner (the user of
/// [`server_url`]).
pub async fn run_as_owner(sql: &str) {
    query_as_owner(sql).await;
}

/// Runs `sql` as the test database's owner; the rows it returns, each column's text joined by
/// `|`.
pub async fn query_as_owner(sql: &str) -> Vec<String> {
    let (client, connection) = tokio_postgres::connect(&server_url(), tokio_postgres::NoTls)
        .await
        .expect("connecting as the owner");
    let task = tokio::spawn(connection);
    let mut rows = Vec::new();
    for message in client.simple_query(sql).await.expect("running SQL as the owner") {
        if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
            rows.push(
                (0..row.len())
                    .map(|i| row.get(i).unwrap_or(""))
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    drop(client);
    let _ = task.await;
    rows
}

/// The row of mutex `name` in `schema`, locked by a session of the owner in a transaction (as a
/// step of another locker would hold it), until the returned client's `ROLLBACK` or `COMMIT`.
pub async fn hold_row(schema: &str, name: &str) -> tokio_postgres::Client {
    let (admin, connection) = tokio_postgres::connect(&server_url(), tokio_postgres::NoTls)
        .await
        .expect("connecting as the owner");
    tokio::spawn(connection);
    let segment = Family::Mutex.segment(&LockName::new(name).unwrap());
    admin.batch_execute("BEGIN").await.unwrap();
    let sql = format!("SELECT 1 FROM \"{schema}\".locks WHERE segment = $1 FOR UPDATE");
    admin.execute(&sql, &[&segment]).await.unwrap();
    admin
}

impl PgHarness {
    /// A schema of its own, made by its owner with `locksmith init --sql --grant locksmith_app`'s
    /// SQL, used by lockers that log in as `locksmith_app` (no rights but those grants).
    pub async fn least_privilege() -> PgHarness {
        let schema = format!("lp_{:016x}", rand::random::<u64>());
        let owner = BackendUrl::parse(&format!("{}?schema={schema}", server_url())).unwrap();
        run_as_owner(&locksmith_postgres::setup_sql(&owner, Some("locksmith_app")).unwrap()).await;
        let url = format!("{}?schema={schema}", app_url());
        let look = PgBackend::connect(&BackendUrl::parse(&url).unwrap()).await.unwrap();
        PgHarness { url, schema, look }
    }
}

#[async_trait]
impl Harness for PgHarness {
    async fn locker(&self) -> Locker {
        locksmith_postgres::connect(&BackendUrl::parse(&self.url).unwrap())
            .await
            .unwrap()
    }

    async fn delete_behind_back(&self, name: &LockName) {
        let n = self.look.delete_holders(Family::Mutex, name).await.unwrap();
        assert!(n > 0, "no holder row to delete");
    }

    async fn delete_behind_back_in(&self, family: Family, name: &LockName) {
        let n = self.look.delete_holders(family, name).await.unwrap();
        assert!(n > 0, "no holder row to delete");
    }

    async fn residue(&self, name: &LockName) -> Vec<String> {
        self.residue_in(Family::Mutex, name).await
    }

    async fn residue_in(&self, family: Family, name: &LockName) -> Vec<String> {
        self.look.entries(family, name).await.expect("reading the entries")
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }
}

/// How many entries of `schema` are before their lock's `since` (never any: the reads of a queue
/// start there and would miss them), as the owner counts them.
pub async fn entries_before_their_start(schema: &str) -> Vec<String> {
    query_as_owner(&format!(
        "SELECT count(*) FROM \"{schema}\".entries e JOIN \"{schema}\".locks l ON l.segment = e.segment \
         WHERE e.seq < l.since"
    ))
    .await
}
