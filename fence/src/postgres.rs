//! A fence row per lock, checked in the application's own PostgreSQL transaction.
//!
//! The table holds, for each lock name, the highest fencing token a transaction has been
//! admitted with. [`Fence::admit`] runs one statement that raises the row to the holder's token
//! if it is not lower, and locks the row until the transaction ends: a later holder's `admit`
//! waits for this transaction to commit or roll back, and an earlier holder's `admit` after a
//! later one committed is refused with [`FenceError::Stale`]. Call it first in the transaction
//! whose writes it guards; outside a transaction it protects nothing (the row lock ends with the
//! statement).

use tokio_postgres::GenericClient;

use crate::FenceError;

/// The longest identifier PostgreSQL keeps without truncating it.
const MAX_IDENTIFIER_LEN: usize = 63;

/// A fence table: one row per lock name with the highest token admitted.
///
/// # Examples
///
/// ```no_run
/// # async fn run(client: &mut tokio_postgres::Client, token: u64) -> Result<(), Box<dyn std::error::Error>> {
/// use locksmith_fence::postgres::Fence;
///
/// let fence = Fence::new("app.fences")?;
/// fence.create_table(&*client).await?;              // once, by a user allowed to create it
///
/// let txn = client.transaction().await?;
/// fence.admit(&txn, "billing", token).await?;      // Err(FenceError::Stale): stop, roll back
/// txn.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 1", &[]).await?;
/// txn.commit().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Fence {
    table: String,
    admit: String,
    highest: String,
}

impl Fence {
    /// A fence kept in `table` (`name` or `schema.name`: lower-case letters, digits and `_`,
    /// not starting with a digit, at most 63 bytes each).
    ///
    /// # Errors
    ///
    /// [`FenceError::Invalid`] for any other table name (it is put into SQL as it is).
    ///
    /// # Examples
    ///
    /// ```
    /// use locksmith_fence::{postgres::Fence, FenceError};
    ///
    /// let fence = Fence::new("app.fences")?;
    /// assert!(matches!(Fence::new("fences; DROP TABLE x"), Err(FenceError::Invalid(_))));
    /// # let _ = fence; Ok::<(), FenceError>(())
    /// ```
    pub fn new(table: &str) -> Result<Self, FenceError> {
        let parts: Vec<&str> = table.split('.').collect();
        if parts.len() > 2 || !parts.iter().all(|part| is_plain_identifier(part)) {
            return Err(FenceError::Invalid(format!(
                "fence table {table:?}: expected name or schema.name of lower-case letters, digits and _"
            )));
        }
        Ok(Fence {
            admit: format!(
                "INSERT INTO {table} AS f (lock, token) VALUES ($1, $2) \
                 ON CONFLICT (lock) DO UPDATE SET token = EXCLUDED.token \
                 WHERE f.token <= EXCLUDED.token RETURNING token"
            ),
            highest: format!("SELECT token FROM {table} WHERE lock = $1"),
            table: table.to_owned(),
        })
    }

    /// The statement that creates the table (for a migration tool of your own).
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = locksmith_fence::postgres::Fence::new("app.fences")?;
    /// assert_eq!(
    ///     fence.create_table_sql(),
    ///     "CREATE TABLE IF NOT EXISTS app.fences (lock text PRIMARY KEY, token bigint NOT NULL)"
    /// );
    /// # Ok::<(), locksmith_fence::FenceError>(())
    /// ```
    pub fn create_table_sql(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (lock text PRIMARY KEY, token bigint NOT NULL)",
            self.table
        )
    }

    /// Creates the table if it does not exist.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`] if PostgreSQL refuses (no `CREATE` right on the schema, say).
    ///
    /// # Cancel safety
    ///
    /// Dropped, the statement may still run to its end on the server; `CREATE TABLE IF NOT EXISTS`
    /// can be sent again.
    ///
    /// # Examples
    ///
    /// Needs a PostgreSQL server:
    ///
    /// ```no_run
    /// # async fn run(client: &tokio_postgres::Client) -> Result<(), locksmith_fence::FenceError> {
    /// let fence = locksmith_fence::postgres::Fence::new("app.fences")?;
    /// fence.create_table(client).await?; // once, by a user allowed to create it
    /// # Ok(()) }
    /// ```
    pub async fn create_table(&self, client: &impl GenericClient) -> Result<(), FenceError> {
        client
            .batch_execute(&self.create_table_sql())
            .await
            .map_err(store_error)
    }

    /// Admits a holder of `lock` with `token` into the transaction `client` is in: raises the
    /// lock's highest token to `token` (equal is admitted: one holder writes many times) and
    /// keeps its row locked until the transaction ends.
    ///
    /// # Errors
    ///
    /// - [`FenceError::Stale`] if a transaction with a higher token has committed: roll back.
    /// - [`FenceError::Invalid`] for an empty lock name or a token above `i64::MAX`.
    /// - [`FenceError::Store`] if the statement failed (the table is missing, the connection
    ///   broke); the transaction is then aborted.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the statement running; its transaction is the caller's and
    /// ends with it.
    ///
    /// # Examples
    ///
    /// Needs a PostgreSQL server:
    ///
    /// ```no_run
    /// # async fn run(client: &mut tokio_postgres::Client, token: u64) -> Result<(), Box<dyn std::error::Error>> {
    /// use locksmith_fence::{postgres::Fence, FenceError};
    /// let fence = Fence::new("app.fences")?;
    /// let txn = client.transaction().await?;
    /// match fence.admit(&txn, "billing", token).await {
    ///     Err(FenceError::Stale { highest, .. }) => return Err(format!("a later holder ({highest}) wrote").into()),
    ///     other => other?,
    /// }
    /// txn.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 1", &[]).await?;
    /// txn.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn admit(&self, client: &impl GenericClient, lock: &str, token: u64) -> Result<(), FenceError> {
        if lock.is_empty() {
            return Err(FenceError::Invalid("an empty lock name".into()));
        }
        let signed =
            i64::try_from(token).map_err(|_| FenceError::Invalid(format!("token {token} does not fit a bigint")))?;
        let admitted = client
            .query_opt(&self.admit, &[&lock, &signed])
            .await
            .map_err(store_error)?;
        if admitted.is_some() {
            return Ok(());
        }
        let highest = self.highest(client, lock).await?.unwrap_or_default();
        tracing::debug!(lock, token, highest, "stale fencing token refused");
        Err(FenceError::Stale { token, highest })
    }

    /// The highest token admitted for `lock`, if any.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`] if the query failed or the column is not a `bigint`;
    /// [`FenceError::Invalid`] for a negative token.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a read only, nothing is left behind.
    ///
    /// # Examples
    ///
    /// Needs a PostgreSQL server:
    ///
    /// ```no_run
    /// # async fn run(client: &tokio_postgres::Client) -> Result<(), locksmith_fence::FenceError> {
    /// let fence = locksmith_fence::postgres::Fence::new("app.fences")?;
    /// if let Some(token) = fence.highest(client, "billing").await? {
    ///     println!("billing was last written under token {token}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn highest(&self, client: &impl GenericClient, lock: &str) -> Result<Option<u64>, FenceError> {
        let row = client.query_opt(&self.highest, &[&lock]).await.map_err(store_error)?;
        let Some(row) = row else { return Ok(None) };
        // A table made by hand (`IF NOT EXISTS` keeps it) may hold another type, NULL or a
        // negative number: an error, not a panic and not a token of 0.
        let token: i64 = row.try_get(0).map_err(store_error)?;
        u64::try_from(token).map(Some).map_err(|_| {
            FenceError::Invalid(format!(
                "the highest token of {lock:?} in the store is negative ({token})"
            ))
        })
    }
}

fn is_plain_identifier(part: &str) -> bool {
    let mut chars = part.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && part.len() <= MAX_IDENTIFIER_LEN
}

fn store_error(error: tokio_postgres::Error) -> FenceError {
    FenceError::Store(Box::new(error))
}
