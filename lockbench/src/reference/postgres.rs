//! `postgres://` reference rows, with the bare `tokio-postgres` client and prepared statements:
//! the floor takes a lock with one statement (`INSERT … ON CONFLICT DO UPDATE … WHERE free
//! RETURNING token`: a row per lock with a holder and a fencing token) and releases it with
//! another; its notification floor is a bare LISTEN/NOTIFY; the peer row is a session advisory
//! lock (`pg_advisory_lock(hashtext(name))` on a connection per client), what the
//! `distributed-lock-postgres` crate and DistributedLock wrap, and the `distributed-lock-postgres`
//! crate itself, its own API unmodified (0.2.0: a session advisory lock per handle, waited for in
//! `pg_advisory_lock` under a `lock_timeout`, on a connection of its sqlx pool). The floor gives
//! no lease expiry, no queue and no FIFO; the advisory locks no lease and no fencing token.
//!
//! The floor's writes commit as locksmith's do: `synchronous_commit = on` (PostgreSQL's default),
//! whatever the server's setting ([`connect_durable`]). A grant whose commit is answered before
//! it reached the server's log can be forgotten by a crash while its holder goes on, which is no
//! lock; locksmith sets it on every connection, and the test servers of `scripts/backends` run
//! with it off (fast test data), which would give the floor a cheaper commit than any lock that
//! survives a crash.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use async_trait::async_trait;
use futures_util::StreamExt;
use tokio_postgres::{AsyncMessage, Client, NoTls, Statement};

use super::{token, FloorTimes, Notification, Reference};
use crate::system::{Held, LockClient, LockSystem};

/// The table of the floor.
const SETUP: &str = "CREATE TABLE IF NOT EXISTS lockbench_floor \
    (name text PRIMARY KEY, holder text, token bigint NOT NULL DEFAULT 0)";

/// Sets up the floor (its table), the notification floor and the peer.
pub async fn reference(url: &str) -> Result<Reference> {
    let plain = plain_url(url);
    let client = connect(&plain).await?;
    client
        .batch_execute(SETUP)
        .await
        .context("creating the floor's table")?;
    let plain_write = PlainUpsert::new(&plain).await?;
    Ok(Reference {
        plain_write: Some(Arc::new(plain_write)),
        floor: Some(Arc::new(Floor { url: plain.clone() })),
        notify: Some(Arc::new(ListenFloor { url: plain.clone() })),
        peers: vec![
            Arc::new(DistributedLockPostgres { url: plain.clone() }),
            Arc::new(Advisory { url: plain }),
        ],
        herd: Vec::new(),
        single_attempt: Vec::new(),
    })
}

/// One prepared upsert of a row of its own: the `guarded` workload's floor.
struct PlainUpsert {
    client: Client,
    upsert: tokio_postgres::Statement,
    key: String,
}

impl PlainUpsert {
    async fn new(url: &str) -> Result<PlainUpsert> {
        let client = connect_durable(url).await?;
        client
            .batch_execute("CREATE TABLE IF NOT EXISTS lockbench_plain (key text PRIMARY KEY, value bytea NOT NULL)")
            .await
            .context("creating the plain write's table")?;
        let upsert = client
            .prepare(
                "INSERT INTO lockbench_plain (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            )
            .await?;
        Ok(PlainUpsert {
            client,
            upsert,
            key: format!("plain-{}", std::process::id()),
        })
    }
}

#[async_trait]
impl super::PlainWrite for PlainUpsert {
    async fn put(&self, value: &[u8]) -> Result<()> {
        self.client.execute(&self.upsert, &[&self.key, &value]).await?;
        Ok(())
    }
}

/// The statement counter's own query, recognised by this marker and left out of the count.
/// Another user's statements have no `queryid` (nor text) for a reader without
/// `pg_read_all_stats`: they count under one id per user.
const STATEMENTS: &str = "SELECT /* lockbench statement counter */ \
    userid::text || '/' || COALESCE(queryid::text, 'hidden') || '/' || toplevel::text, calls, query \
    FROM pg_stat_statements \
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
    AND query NOT LIKE '%lockbench statement counter%'";

/// The top-level statements the server has executed in `url`'s database, per statement (from
/// `pg_stat_statements`), keyed `label #id`: the label is [`statement_label`]'s, and `other` for
/// another user's statement, whose text the server hides.
///
/// # Errors
/// When the server cannot be reached or has no `pg_stat_statements` view in that database.
pub async fn statements_executed(url: &str) -> Result<BTreeMap<String, u64>> {
    let client = connect(&plain_url(url)).await?;
    let rows = client
        .query(STATEMENTS, &[])
        .await
        .context("reading pg_stat_statements (in shared_preload_libraries, and created in the database?)")?;
    let mut by_statement = BTreeMap::new();
    for row in rows {
        let (id, calls, query): (String, i64, Option<String>) = (row.get(0), row.get(1), row.get(2));
        let label = statement_label(query.as_deref().unwrap_or(""));
        *by_statement.entry(format!("{label} #{id}")).or_insert(0) += calls.max(0) as u64;
    }
    Ok(by_statement)
}

/// A short name for a statement (its leading `--` comments skipped): the function a `SELECT`
/// calls, `WITH` and the name of a statement's first common table expression, else its first
/// word.
fn statement_label(query: &str) -> String {
    if query.starts_with('<') {
        return "other".into();
    }
    let mut query = query.trim_start();
    while let Some(comment) = query.strip_prefix("--") {
        query = comment.split_once('\n').map_or("", |(_, rest)| rest).trim_start();
    }
    let first = query.split_whitespace().next().unwrap_or("empty").to_uppercase();
    let is_name = |c: char| c.is_alphanumeric() || c == '_';
    let called = query.find('(').filter(|_| first == "SELECT").and_then(|open| {
        let before = query[..open].trim_end().trim_end_matches('"');
        let name: String = before.chars().rev().take_while(|c| is_name(*c)).collect();
        let name: String = name.chars().rev().collect();
        let keyword = [
            "FROM", "IN", "EXISTS", "AS", "VALUES", "WHERE", "AND", "OR", "ANY", "ALL", "ON",
        ]
        .contains(&name.to_uppercase().as_str());
        (!name.is_empty() && !keyword).then_some(name)
    });
    let cte = || {
        let name = query.split_whitespace().nth(1).unwrap_or("");
        format!("WITH {}", name.trim_matches('"'))
    };
    called.unwrap_or_else(|| if first == "WITH" { cte() } else { first })
}

/// The URL without locksmith's options (tokio-postgres refuses options it does not know).
fn plain_url(url: &str) -> String {
    url.split('?').next().unwrap_or(url).to_owned()
}

/// One connection whose commits wait for the server's log, as locksmith's do (see the module docs).
async fn connect_durable(url: &str) -> Result<Client> {
    let client = connect(url).await?;
    client
        .batch_execute("SET synchronous_commit = on")
        .await
        .context("setting synchronous_commit")?;
    Ok(client)
}

/// One connection, driven by a task of its own.
async fn connect(url: &str) -> Result<Client> {
    let (client, connection) = tokio::time::timeout(Duration::from_secs(10), tokio_postgres::connect(url, NoTls))
        .await
        .map_err(|_| anyhow!("connecting to postgres: no answer within 10 s"))??;
    tokio::spawn(connection);
    Ok(client)
}

/// The floor: one statement to take, one to release; one attempt, never waits.
struct Floor {
    url: String,
}

struct FloorClient {
    client: Arc<Client>,
    take: Statement,
    give: Statement,
}

struct FloorHeld {
    client: Arc<Client>,
    give: Statement,
    name: String,
    holder: String,
}

#[async_trait]
impl LockSystem for Floor {
    fn system(&self) -> &'static str {
        "floor"
    }
    fn backend(&self) -> &'static str {
        "postgres"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        let client = connect_durable(&self.url).await?;
        let take = client
            .prepare(
                "INSERT INTO lockbench_floor AS l (name, holder, token) VALUES ($1, $2, 1) \
                 ON CONFLICT (name) DO UPDATE SET holder = $2, token = l.token + 1 WHERE l.holder IS NULL \
                 RETURNING token",
            )
            .await?;
        let give = client
            .prepare("UPDATE lockbench_floor SET holder = NULL WHERE name = $1 AND holder = $2")
            .await?;
        Ok(Arc::new(FloorClient {
            client: Arc::new(client),
            take,
            give,
        }))
    }
}

#[async_trait]
impl LockClient for FloorClient {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        let holder = token();
        if self.client.query_opt(&self.take, &[&name, &holder]).await?.is_none() {
            bail!("held");
        }
        Ok(Box::new(FloorHeld {
            client: self.client.clone(),
            give: self.give.clone(),
            name: name.to_owned(),
            holder,
        }))
    }
}

#[async_trait]
impl Held for FloorHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        self.client.execute(&self.give, &[&self.name, &self.holder]).await?;
        Ok(())
    }
}

/// The bare LISTEN/NOTIFY latency: a listening connection, a NOTIFY from another at t0.
struct ListenFloor {
    url: String,
}

#[async_trait]
impl Notification for ListenFloor {
    fn backend(&self) -> &'static str {
        "postgres"
    }
    async fn once(&self, blocked: Duration) -> Result<FloorTimes> {
        let channel = format!("lockbench_{}", token().replace('-', "_"));
        let (listener, mut connection) = tokio_postgres::connect(&self.url, NoTls).await?;
        let (got, received) = tokio::sync::oneshot::channel();
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        tokio::spawn(async move {
            let mut got = Some(got);
            while let Some(message) = messages.next().await {
                if let Ok(AsyncMessage::Notification(_)) = message {
                    if let Some(got) = got.take() {
                        let _ = got.send(Instant::now());
                    }
                }
            }
        });
        listener.batch_execute(&format!("LISTEN {channel}")).await?;
        let sender = connect(&self.url).await?;
        let notify = sender.prepare(&format!("NOTIFY {channel}")).await?;
        tokio::time::sleep(blocked).await;
        let t0 = Instant::now();
        sender.execute(&notify, &[]).await?;
        let t1 = tokio::time::timeout(Duration::from_secs(10), received)
            .await
            .map_err(|_| anyhow!("no notification within 10 s"))??;
        Ok(FloorTimes::notified(t1.saturating_duration_since(t0)))
    }
}

/// A session advisory lock: `pg_advisory_lock` waits on the server, on a connection of the
/// client's own (one per client, as the advisory-lock libraries hold one per lock).
struct Advisory {
    url: String,
}

struct AdvisoryClient {
    client: Arc<Client>,
    lock: Statement,
    unlock: Statement,
}

struct AdvisoryHeld {
    client: Arc<Client>,
    unlock: Statement,
    name: String,
}

#[async_trait]
impl LockSystem for Advisory {
    fn system(&self) -> &'static str {
        "pg_advisory_lock"
    }
    fn backend(&self) -> &'static str {
        "postgres"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        let client = connect(&self.url).await?;
        let lock = client.prepare("SELECT pg_advisory_lock(hashtext($1))").await?;
        let unlock = client.prepare("SELECT pg_advisory_unlock(hashtext($1))").await?;
        Ok(Arc::new(AdvisoryClient {
            client: Arc::new(client),
            lock,
            unlock,
        }))
    }
}

#[async_trait]
impl LockClient for AdvisoryClient {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        tokio::time::timeout(Duration::from_secs(60), self.client.execute(&self.lock, &[&name]))
            .await
            .map_err(|_| anyhow!("pg_advisory_lock: not granted within 60 s"))??;
        Ok(Box::new(AdvisoryHeld {
            client: self.client.clone(),
            unlock: self.unlock.clone(),
            name: name.to_owned(),
        }))
    }
}

#[async_trait]
impl Held for AdvisoryHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        self.client.execute(&self.unlock, &[&self.name]).await?;
        Ok(())
    }
}

/// The `distributed-lock-postgres` crate, its own API unmodified: one provider (its sqlx pool)
/// per client.
struct DistributedLockPostgres {
    url: String,
}

struct DlpClient(distributed_lock_postgres::PostgresLockProvider);

struct DlpHeld(distributed_lock_postgres::handle::PostgresLockHandle);

#[async_trait]
impl LockSystem for DistributedLockPostgres {
    fn system(&self) -> &'static str {
        "distributed-lock-postgres"
    }
    fn backend(&self) -> &'static str {
        "postgres"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        let provider = distributed_lock_postgres::PostgresLockProvider::new(self.url.clone())
            .await
            .map_err(|e| anyhow!("{e}"))?;
        Ok(Arc::new(DlpClient(provider)))
    }
}

#[async_trait]
impl LockClient for DlpClient {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        use distributed_lock_core::{DistributedLock, LockProvider};
        let handle = self
            .0
            .create_lock(name)
            .acquire(Some(Duration::from_secs(60)))
            .await
            .map_err(|e| anyhow!("{e}"))?;
        Ok(Box::new(DlpHeld(handle)))
    }
}

#[async_trait]
impl Held for DlpHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        use distributed_lock_core::LockHandle;
        self.0.release().await.map_err(|e| anyhow!("{e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::statement_label;

    #[test]
    fn labels_statements_by_the_function_called() {
        assert_eq!(statement_label(r#"SELECT * FROM "ls_1".step($1, $2)"#), "step");
        assert_eq!(statement_label("SELECT pg_advisory_lock($1)"), "pg_advisory_lock");
        assert_eq!(statement_label("select 1"), "SELECT");
        assert_eq!(statement_label("SELECT a FROM (SELECT 1) t"), "SELECT");
        assert_eq!(statement_label("-- why\n  -- and how\nSELECT x.renew($1)"), "renew");
        assert_eq!(
            statement_label("WITH freed AS (UPDATE t SET a = $1) SELECT 1"),
            "WITH freed"
        );
        assert_eq!(statement_label("INSERT INTO t (a) VALUES ($1)"), "INSERT");
        assert_eq!(statement_label(r#"LISTEN "locksmith""#), "LISTEN");
        assert_eq!(statement_label("<insufficient privilege>"), "other");
    }
}
