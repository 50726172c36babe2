//! The fenced-store mode's storage: storage outside the lock service, written through
//! `locksmith-fence`'s PostgreSQL fence as a user would. Each write is one transaction on the
//! test PostgreSQL server: [`Fence::admit`] with the writer's token (refused when a higher token
//! has committed), then a row `(lock, token, writer)` appended to a log table. The fence's row
//! lock orders the transactions, so the log's ids are the order the store accepted the writes in,
//! which the checker reads as it reads the register's.
//!
//! The workers of this mode write blind (as in the guarded mode): the fence, not the worker's
//! `lost()`, is what must refuse a stale holder. It works with every backend, `file://` and the
//! Redis quorum included: all it takes is the token.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use locksmith::fence::postgres::Fence;
use locksmith::fence::FenceError;
use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

use crate::register::Accepted;

/// The fence table (one row per lock: the highest token admitted).
const FENCE_TABLE: &str = "chaos_fences";

/// The log of accepted writes.
const CREATE_LOG: &str = "CREATE TABLE IF NOT EXISTS chaos_fenced_log \
    (id bigserial PRIMARY KEY, lock text NOT NULL, token bigint NOT NULL, writer text NOT NULL)";

/// The environment variable with the fenced store's URL (the test PostgreSQL server).
pub const URL_VAR: &str = "LOCKSMITH_TEST_POSTGRES";

/// A connection to the fenced store, made again when it was closed (the fault suite restarts
/// the server it is on: a store a worker could no longer write to after the first restart made
/// the rows of that fault vacuous).
#[derive(Clone)]
pub struct FencedLog {
    url: String,
    client: Arc<Mutex<Client>>,
    fence: Fence,
}

/// A new connection to the store at `url`.
async fn connect_client(url: &str) -> Result<Client> {
    let (client, connection) = tokio::time::timeout(Duration::from_secs(10), tokio_postgres::connect(url, NoTls))
        .await
        .context("connecting to the fenced store: timed out")?
        .context("connecting to the fenced store")?;
    tokio::spawn(connection);
    Ok(client)
}

impl FencedLog {
    /// Connects to the store at `url` (a `postgres://` URL of the test server).
    pub async fn connect(url: &str) -> Result<FencedLog> {
        Ok(FencedLog {
            url: url.to_owned(),
            client: Arc::new(Mutex::new(connect_client(url).await?)),
            fence: Fence::new(FENCE_TABLE)?,
        })
    }

    /// The connection, made again first if it was closed.
    async fn client(&self) -> Result<tokio::sync::MutexGuard<'_, Client>> {
        let mut client = self.client.lock().await;
        if client.is_closed() {
            *client = connect_client(&self.url).await?;
        }
        Ok(client)
    }

    /// Creates the tables if they are missing (once, by the driver, before the workers start:
    /// concurrent `CREATE TABLE IF NOT EXISTS` can fail).
    pub async fn create_tables(&self) -> Result<()> {
        let client = self.client().await?;
        self.fence.create_table(&*client).await?;
        client
            .batch_execute(CREATE_LOG)
            .await
            .context("creating the log table")?;
        Ok(())
    }

    /// Writes `token` for `lock` as `writer` in one transaction; `Ok(false)` if the fence refused
    /// it (a higher token had committed: nothing written).
    pub async fn append(&self, lock: &str, token: u64, writer: &str) -> Result<bool> {
        let mut client = self.client().await?;
        let txn = client.transaction().await.context("beginning a transaction")?;
        match self.fence.admit(&txn, lock, token).await {
            Ok(()) => {}
            Err(FenceError::Stale { .. }) => return Ok(false), // the transaction rolls back
            Err(e) => return Err(e).context("admitting the token"),
        }
        let signed = i64::try_from(token).context("the token")?;
        txn.execute(
            "INSERT INTO chaos_fenced_log (lock, token, writer) VALUES ($1, $2, $3)",
            &[&lock, &signed, &writer],
        )
        .await
        .context("appending to the log")?;
        txn.commit().await.context("committing")?;
        Ok(true)
    }

    /// Every write the store accepted for `lock`, in order (and removed).
    pub async fn read(&self, lock: &str) -> Result<Vec<Accepted>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "DELETE FROM chaos_fenced_log WHERE lock = $1 RETURNING id, token, writer",
                &[&lock],
            )
            .await
            .context("reading the log")?;
        let mut log: Vec<(i64, Accepted)> = rows
            .iter()
            .map(|row| {
                let token = u64::try_from(row.get::<_, i64>(1)).unwrap_or_default();
                let accepted = Accepted::write(token, row.get(2));
                (row.get(0), accepted)
            })
            .collect();
        log.sort_by_key(|(id, _)| *id);
        client
            .execute(&format!("DELETE FROM {FENCE_TABLE} WHERE lock = $1"), &[&lock])
            .await
            .context("removing the fence row")?;
        Ok(log.into_iter().map(|(_, a)| a).collect())
    }
}
