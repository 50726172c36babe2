//! `mysql://` reference rows, with the bare `sqlx` MySQL client (its connection as locksmith
//! opens it, prepared statements in its statement cache): the floor takes a lock with one
//! `SELECT GET_LOCK(?, 0)` and releases it with one `SELECT RELEASE_LOCK(?)`, on a connection per
//! client; its handover floor is a waiter blocked in `SELECT GET_LOCK(?, 10)` whose statement
//! returns when the holder's `RELEASE_LOCK` frees the lock (the server's notification and the take
//! in one). The peer is the `distributed-lock-mysql` crate, its own API unmodified (0.2.0: a
//! `GET_LOCK` on a connection of its sqlx pool held for as long as the lock). `GET_LOCK` gives no
//! lease that expires while the holder's connection stays open, no FIFO and no fencing token.
//!
//! `row-lease` is PostgreSQL's floor made on MySQL: a lease row with a fencing token, taken with
//! one `INSERT … ON DUPLICATE KEY UPDATE` (free, or its lease expired by the server's clock) and
//! given back with one `UPDATE`, each an InnoDB transaction of its own, as every locksmith step
//! is. It is the least a lock with leases and tokens writes (no queue, no FIFO, no wake-up); a
//! named lock writes nothing, which is the gap between `floor` and locksmith's uncontended row.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use async_trait::async_trait;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Row};
use tokio::sync::Mutex;

use super::{token, FloorTimes, Notification, Reference};
use crate::system::{Held, LockClient, LockSystem};

/// Sets up the floor, the handover floor and the peer.
pub async fn reference(url: &str) -> Result<Reference> {
    let plain = plain_url(url);
    // Reachable, and the URL one the bare client reads.
    connect(&plain).await?;
    Ok(Reference {
        plain_write: None,
        floor: Some(Arc::new(Floor { url: plain.clone() })),
        notify: Some(Arc::new(GetLockFloor { url: plain.clone() })),
        peers: vec![Arc::new(DistributedLockMysql { url: plain.clone() })],
        herd: Vec::new(),
        single_attempt: vec![Arc::new(RowLease { url: plain })],
    })
}

/// The URL without locksmith's options, with the `mysql` scheme (`mariadb://` too), and of
/// several hosts (a primary and its replicas) the first only: the bare client takes one.
fn plain_url(url: &str) -> String {
    let base = url.split('?').next().unwrap_or(url);
    let rest = base
        .strip_prefix("mariadb://")
        .or_else(|| base.strip_prefix("mysql://"))
        .unwrap_or(base);
    let (auth, hosts_path) = match rest.rsplit_once('@') {
        Some((auth, tail)) => (format!("{auth}@"), tail),
        None => (String::new(), rest),
    };
    let (hosts, path) = hosts_path.split_once('/').map_or((hosts_path, ""), |(h, p)| (h, p));
    let first = hosts.split(',').next().unwrap_or(hosts);
    format!("mysql://{auth}{first}/{path}")
}

/// One connection of the bare client, with no statement logging (as locksmith's).
async fn connect(url: &str) -> Result<MySqlConnection> {
    let options = MySqlConnectOptions::from_str(url)
        .context("reading the mysql URL")?
        .disable_statement_logging();
    tokio::time::timeout(Duration::from_secs(10), options.connect())
        .await
        .map_err(|_| anyhow!("connecting to mysql: no answer within 10 s"))?
        .context("connecting to mysql")
}

/// `GET_LOCK`'s answer: 1 taken, 0 not (timed out), NULL an error.
async fn get_lock(c: &mut MySqlConnection, name: &str, wait_s: i64) -> Result<bool> {
    let row = sqlx::query("SELECT GET_LOCK(?, ?)")
        .bind(name)
        .bind(wait_s)
        .fetch_one(&mut *c)
        .await?;
    Ok(row.try_get::<Option<i64>, _>(0)? == Some(1))
}

async fn release_lock(c: &mut MySqlConnection, name: &str) -> Result<()> {
    sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(name)
        .fetch_one(&mut *c)
        .await?;
    Ok(())
}

/// The floor: one statement to take (never waits), one to release.
struct Floor {
    url: String,
}

struct FloorClient(Arc<Mutex<MySqlConnection>>);

struct FloorHeld {
    conn: Arc<Mutex<MySqlConnection>>,
    name: String,
}

#[async_trait]
impl LockSystem for Floor {
    fn system(&self) -> &'static str {
        "floor"
    }
    fn backend(&self) -> &'static str {
        "mysql"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        Ok(Arc::new(FloorClient(Arc::new(Mutex::new(connect(&self.url).await?)))))
    }
}

#[async_trait]
impl LockClient for FloorClient {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        if !get_lock(&mut *self.0.lock().await, name, 0).await? {
            bail!("held");
        }
        Ok(Box::new(FloorHeld {
            conn: self.0.clone(),
            name: name.to_owned(),
        }))
    }
}

#[async_trait]
impl Held for FloorHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        release_lock(&mut *self.conn.lock().await, &self.name).await
    }
}

/// The bare handover: a `GET_LOCK` waiting on the server, answered when the holder releases.
struct GetLockFloor {
    url: String,
}

#[async_trait]
impl Notification for GetLockFloor {
    fn backend(&self) -> &'static str {
        "mysql"
    }
    async fn once(&self, blocked: Duration) -> Result<FloorTimes> {
        let name = format!("lockbench-handover-{}", token());
        let mut holder = connect(&self.url).await?;
        let mut waiter = connect(&self.url).await?;
        if !get_lock(&mut holder, &name, 0).await? {
            bail!("the handover floor's lock {name} is taken");
        }
        let wanted = name.clone();
        let waiting = tokio::spawn(async move {
            let got = get_lock(&mut waiter, &wanted, 10).await;
            let t1 = Instant::now();
            if matches!(got, Ok(true)) {
                let _ = release_lock(&mut waiter, &wanted).await;
            }
            got.map(|taken| (taken, t1))
        });
        tokio::time::sleep(blocked).await;
        let t0 = Instant::now();
        release_lock(&mut holder, &name).await?;
        let (taken, t1) = waiting.await??;
        if !taken {
            bail!("the waiting GET_LOCK was not granted within 10 s");
        }
        let d = t1.saturating_duration_since(t0);
        Ok(FloorTimes {
            notified: d,
            taken: Some(d),
        })
    }
}

/// The `distributed-lock-mysql` crate, its own API unmodified: one provider (its sqlx pool) per
/// client.
struct DistributedLockMysql {
    url: String,
}

struct DlmClient(distributed_lock_mysql::MySqlLockProvider);

struct DlmHeld(distributed_lock_mysql::MySqlLockHandle);

#[async_trait]
impl LockSystem for DistributedLockMysql {
    fn system(&self) -> &'static str {
        "distributed-lock-mysql"
    }
    fn backend(&self) -> &'static str {
        "mysql"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        let provider = distributed_lock_mysql::MySqlLockProvider::new(self.url.clone())
            .await
            .map_err(|e| anyhow!("{e}"))?;
        Ok(Arc::new(DlmClient(provider)))
    }
}

#[async_trait]
impl LockClient for DlmClient {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        use distributed_lock_core::{DistributedLock, LockProvider};
        let handle = self
            .0
            .create_lock(name)
            .acquire(Some(Duration::from_secs(60)))
            .await
            .map_err(|e| anyhow!("{e}"))?;
        Ok(Box::new(DlmHeld(handle)))
    }
}

#[async_trait]
impl Held for DlmHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        use distributed_lock_core::LockHandle;
        self.0.release().await.map_err(|e| anyhow!("{e}"))
    }
}

/// A lease row with a fencing token, one statement to take and one to give back (see the module
/// docs).
struct RowLease {
    url: String,
}

struct RowLeaseClient(Arc<Mutex<MySqlConnection>>);

struct RowLeaseHeld {
    conn: Arc<Mutex<MySqlConnection>>,
    name: String,
    holder: u64,
}

/// Its table, in the URL's database.
const ROW_LEASE_TABLE: &str = "CREATE TABLE IF NOT EXISTS lockbench_row_lease (\
     name VARBINARY(255) NOT NULL PRIMARY KEY, holder BIGINT UNSIGNED NULL, \
     token BIGINT UNSIGNED NOT NULL, expires_at DATETIME(6) NULL) ENGINE = InnoDB";

/// Takes the row when it is free or its lease expired: the holder is set first, so the later
/// assignments (MySQL runs them in order, each seeing the ones before) know whether it was taken;
/// the new token comes back in the answer's `LAST_INSERT_ID` (1 when the row is new).
const ROW_LEASE_TAKE: &str = "INSERT INTO lockbench_row_lease (name, holder, token, expires_at) \
     VALUES (?, ?, 1, NOW(6) + INTERVAL ? MICROSECOND) ON DUPLICATE KEY UPDATE \
     holder = IF(holder IS NULL OR expires_at < NOW(6), VALUES(holder), holder), \
     token = IF(holder = VALUES(holder), LAST_INSERT_ID(token + 1), token), \
     expires_at = IF(holder = VALUES(holder), VALUES(expires_at), expires_at)";

const ROW_LEASE_GIVE: &str = "UPDATE lockbench_row_lease SET holder = NULL WHERE name = ? AND holder = ?";

#[async_trait]
impl LockSystem for RowLease {
    fn system(&self) -> &'static str {
        "row-lease"
    }
    fn backend(&self) -> &'static str {
        "mysql"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        let mut c = connect(&self.url).await?;
        sqlx::Executor::execute(&mut c, ROW_LEASE_TABLE)
            .await
            .context("creating the row-lease table")?;
        Ok(Arc::new(RowLeaseClient(Arc::new(Mutex::new(c)))))
    }
}

#[async_trait]
impl LockClient for RowLeaseClient {
    async fn acquire(&self, name: &str, ttl: Duration) -> Result<Box<dyn Held>> {
        let holder = holder_id();
        let ttl_us = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
        let done = sqlx::query(ROW_LEASE_TAKE)
            .bind(name)
            .bind(holder)
            .bind(ttl_us)
            .execute(&mut *self.0.lock().await)
            .await?;
        // 1: a new row; 2: a row taken; 0: held by another.
        if done.rows_affected() == 0 {
            bail!("held");
        }
        let token = if done.rows_affected() == 1 {
            1
        } else {
            done.last_insert_id()
        };
        if token == 0 {
            bail!("the row-lease take answered no token");
        }
        Ok(Box::new(RowLeaseHeld {
            conn: self.0.clone(),
            name: name.to_owned(),
            holder,
        }))
    }
}

#[async_trait]
impl Held for RowLeaseHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        sqlx::query(ROW_LEASE_GIVE)
            .bind(&self.name)
            .bind(self.holder)
            .execute(&mut *self.conn.lock().await)
            .await?;
        Ok(())
    }
}

/// A holder id unique within this process run (and, with the process id, among the clients of
/// one run).
fn holder_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    (u64::from(std::process::id()) << 32) | N.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bare_url_has_one_host_and_no_options() {
        for (url, plain) in [
            ("mysql://u:p@h:3306/db?procedures=off", "mysql://u:p@h:3306/db"),
            (
                "mariadb://u:p@h1:13308,h2:13309/db?replication=sync",
                "mysql://u:p@h1:13308/db",
            ),
            ("mysql://h/db", "mysql://h/db"),
        ] {
            assert_eq!(super::plain_url(url), plain);
        }
    }
}
