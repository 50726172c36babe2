//! `mysql://` reference rows, with the bare `sqlx` MySQL client (its connection as locksmith
//! opens it, prepared statements in its statement cache): the floor takes a lock with one
//! `SELECT GET_LOCK(?, 0)` and releases it with one `SELECT RELEASE_LOCK(?)`, on a connection per
//! client; its handover floor is a waiter blocked in `SELECT GET_LOCK(?, 10)` whose statement
//! returns when the holder's `RELEASE_LOCK` frees the lock (the server's notification and the take
//! in one). The peer is the `distributed-lock-mysql` crate, its own API unmodified (0.2.0: a
//! `GET_LOCK` on a connection of its sqlx pool held for as long as the lock). `GET_LOCK` gives no
//! lease that expires while the holder's connection stays open, no FIFO and no fencing token.

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
        peers: vec![Arc::new(DistributedLockMysql { url: plain })],
        herd: Vec::new(),
    })
}

/// The URL without locksmith's options, with the `mysql` scheme (`mariadb://` too).
fn plain_url(url: &str) -> String {
    let base = url.split('?').next().unwrap_or(url);
    match base.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => base.to_owned(),
    }
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
