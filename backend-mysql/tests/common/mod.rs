//! The harness of the MySQL backend: every harness a database of its own (`locksmith_<random>`)
//! on the server of `LOCKSMITH_TEST_MYSQL` (so tests never see each other's rows), every locker a
//! new `connect` to it (as a separate process would).

use std::time::Duration;

use locksmith_core::conformance::{env_url, Harness};
use locksmith_core::driver::{async_trait, BackendUrl, LockName};
use locksmith_core::{Family, Locker};
use locksmith_mysql::MysqlBackend;
use sqlx::Connection;

/// The test server's URL (`scripts/backends up` exports it); panics when it is unset.
pub fn server_url() -> String {
    env_url("LOCKSMITH_TEST_MYSQL")
}

/// A database of its own.
pub struct MyHarness {
    pub url: String,
    /// The database (the path of [`MyHarness::url`]).
    pub database: String,
    /// A backend of the harness's own, to read and delete rows with.
    pub look: MysqlBackend,
}

impl MyHarness {
    pub async fn plain() -> MyHarness {
        let base = server_url();
        let database = format!("locksmith_{:016x}", rand::random::<u64>());
        run_as_test_user(&format!("CREATE DATABASE {database}")).await;
        let (head, query) = match base.split_once('?') {
            Some((h, q)) => (h.to_owned(), format!("?{q}")),
            None => (base.clone(), String::new()),
        };
        let (server, _) = head.rsplit_once('/').expect("a database in LOCKSMITH_TEST_MYSQL");
        let url = format!("{server}/{database}{query}");
        let look = MysqlBackend::connect(&BackendUrl::parse(&url).unwrap()).await.unwrap();
        MyHarness { url, database, look }
    }

    /// A harness over `url` as it is (its database shared with other harnesses: the tests'
    /// lock names are their own).
    pub async fn shared(url: String) -> MyHarness {
        let look = MysqlBackend::connect(&BackendUrl::parse(&url).unwrap()).await.unwrap();
        let database = BackendUrl::parse(&url).unwrap().path.trim_matches('/').to_owned();
        MyHarness { url, database, look }
    }

    /// The harness's URL with more options (`a=b&c=d`).
    pub fn url_with(&self, options: &str) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}{options}", self.url)
    }
}

/// Runs `sql` as the test user of `LOCKSMITH_TEST_MYSQL`, in its database.
pub async fn run_as_test_user(sql: &str) {
    let url = server_url();
    let mut c = sqlx::MySqlConnection::connect(&url)
        .await
        .expect("connecting as the test user");
    sqlx::Executor::execute(&mut c, sql)
        .await
        .expect("running SQL as the test user");
    let _ = c.close().await;
}

#[async_trait]
impl Harness for MyHarness {
    async fn locker(&self) -> Locker {
        locksmith_mysql::connect(&BackendUrl::parse(&self.url).unwrap())
            .await
            .unwrap()
    }

    async fn delete_behind_back(&self, name: &LockName) {
        self.delete_behind_back_in(Family::Mutex, name).await
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
