//! Which of the URL's servers a connection goes to, and the session it starts with. Every
//! connection a locker opens comes from [`open`]: the steps' connection and its reopenings, the
//! wait connection (`wake.rs`), the `GET_LOCK` sessions (`getlock.rs`).
//!
//! One host: that server (a server, or a proxy or virtual IP in front of several). Several (a
//! primary and its replicas, `mysql://u@db1,db2/locks`): each in the URL's order, and the first
//! that answers and takes writes is used: `@@read_only` off, and `@@super_read_only` off where
//! the server has it (MySQL; MariaDB has no such variable), both read with one `SHOW GLOBAL
//! VARIABLES` (`sql/read_only.sql`), which names only the variables the server has. A replica,
//! or a primary being demoted, is skipped and the next host asked; when none takes writes (a
//! failover under way) the error is `Unavailable`, naming each host and why it was skipped.
//! After a failover, the connections opened again (a step's, the wait connection's) find the
//! promoted replica; a connection still open to a demoted primary is dropped at its first
//! refused write (`error::connection_lost`).
//!
//! `connect_timeout` bounds the whole: each host gets an even share of the time left, so that a
//! primary cut off in silence (its packets dropped) leaves time to ask the others, as
//! locksmith-postgres's `dial.rs` does.
//!
//! With `replication=sync` (the default with several hosts) the server used must also wait for
//! a replica before it answers a commit: semi-synchronous replication on
//! (`rpl_semi_sync_master_enabled`, MySQL's `rpl_semi_sync_source_enabled`), or the connection is
//! refused with `Protocol`, a setting no retry changes (as locksmith-postgres refuses a primary
//! without a synchronous standby); and working (`Rpl_semi_sync_master_status` `ON`): a primary
//! that went on alone because no replica acknowledged in time is skipped as `Unavailable`, which
//! heals once a replica catches up.
//!
//! sqlx opens the sockets itself: no `SO_LINGER` 0 (the crate docs' "Not yet").

use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
use sqlx::{ConnectOptions, MySqlConnection, Row};
use tokio::time::Instant;

use locksmith_core::{LockError, Result};

use crate::config::{Config, Replication, SslMode};
use crate::error::{decode, mysql_error, server_number, timeout, UNKNOWN_SYSTEM_VARIABLE};
use crate::layout::sql;

/// Opens a connection to the URL's server within its connect timeout (with several hosts, the
/// first that takes writes), with the session settings every statement expects.
///
/// # Errors
///
/// `Denied` for a wrong password, a missing database or TLS that cannot be established (with
/// several hosts: when every host refused so); `Unavailable` when the server does not answer in
/// time, or no host takes writes now; `Protocol` with `replication=sync` for a primary without
/// semi-synchronous replication.
pub(crate) async fn open(config: &Config) -> Result<MySqlConnection> {
    #[cfg(feature = "tls")]
    locksmith_core::driver::tls::install_provider();
    let deadline = Instant::now() + config.connect_timeout;
    let [(host, port)] = config.hosts.as_slice() else {
        return open_first_writable(config, deadline).await;
    };
    // One host: its errors as they are, named by the URL.
    let what = format!("connecting to {}", config.url);
    tokio::time::timeout_at(deadline, open_on(config, host, *port, &what, false))
        .await
        .map_err(|_| timeout(&what, config.connect_timeout))?
}

/// [`open`] with several hosts: each in turn, with its share of the time left before `deadline`.
async fn open_first_writable(config: &Config, deadline: Instant) -> Result<MySqlConnection> {
    let mut skipped = Vec::with_capacity(config.hosts.len());
    for (i, (host, port)) in config.hosts.iter().enumerate() {
        let by = share_of(deadline, config.hosts.len() - i);
        // The time this host is given, to the millisecond, for the error (measured when the
        // timeout fired, nothing would be left: "took longer than 0ns").
        let share = by.saturating_duration_since(Instant::now()) + Duration::from_micros(500);
        let share = Duration::from_millis(u64::try_from(share.as_millis()).unwrap_or(u64::MAX));
        let what = format!("connecting to {}", address(host, *port));
        let opened = tokio::time::timeout_at(by, open_on(config, host, *port, &what, true))
            .await
            .unwrap_or_else(|_| Err(timeout(&what, share)));
        match opened {
            Ok(c) => return Ok(c),
            // A setting of the primary's that no other host mends (they are replicas).
            Err(e @ (LockError::Protocol(_) | LockError::InvalidOption(_))) => return Err(e),
            Err(e) => {
                tracing::debug!(host = %address(host, *port), error = %e, "mysql: skipping this host");
                skipped.push(e);
            }
        }
    }
    Err(none_writable(config, skipped))
}

/// The error when no host of several could be used: `Denied` when every one refused us (a wrong
/// password everywhere), else `Unavailable` (a failover under way heals), naming each host and
/// why it was skipped.
fn none_writable(config: &Config, skipped: Vec<LockError>) -> LockError {
    let denied = skipped.iter().all(|e| matches!(e, LockError::Denied(_)));
    let why: Vec<String> = skipped
        .iter()
        .map(|e| match e {
            LockError::Unavailable { message, .. } => message.clone(),
            LockError::Denied(message) => format!("refused: {message}"),
            other => other.to_string(),
        })
        .collect();
    let message = format!(
        "mysql: connecting to {}: no host answers and takes writes now (a failover under way?): {}",
        config.url,
        why.join("; ")
    );
    match denied {
        true => LockError::Denied(message),
        false => LockError::Unavailable { message, source: None },
    }
}

/// The deadline of the first of `parts` even shares of the time left before `deadline`.
fn share_of(deadline: Instant, parts: usize) -> Instant {
    let left = deadline.saturating_duration_since(Instant::now());
    Instant::now() + left / u32::try_from(parts).unwrap_or(u32::MAX).max(1)
}

/// `host:port`, with brackets around an IPv6 address.
fn address(host: &str, port: u16) -> String {
    match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    }
}

/// One host: the connection, with `must_write` the check that it takes writes, the check of
/// `replication=sync`, and the session's settings. `what` names it in errors. Not bounded in
/// time: the caller bounds it.
async fn open_on(config: &Config, host: &str, port: u16, what: &str, must_write: bool) -> Result<MySqlConnection> {
    let mut options = MySqlConnectOptions::new()
        .host(host)
        .port(port)
        .username(&config.user)
        .database(&config.database)
        .ssl_mode(match config.ssl_mode {
            SslMode::Disabled => MySqlSslMode::Disabled,
            SslMode::VerifyCa => MySqlSslMode::VerifyCa,
            SslMode::VerifyIdentity => MySqlSslMode::VerifyIdentity,
        })
        .disable_statement_logging();
    if let Some(password) = &config.password {
        options = options.password(password);
    }
    if let Some(ca) = &config.ca {
        options = options.ssl_ca(ca);
    }
    if let Some((cert, key)) = &config.client {
        options = options.ssl_client_cert(cert).ssl_client_key(key);
    }
    let mut c = match options.connect().await {
        Ok(c) => c,
        Err(e) => return Err(connect_error(config, host, port, what, e).await),
    };
    if must_write {
        if let Some(why) = read_only(&mut c).await? {
            return Err(LockError::Unavailable {
                message: format!(
                    "mysql: {} takes no writes ({why}): a replica, or a primary being demoted",
                    address(host, port)
                ),
                source: None,
            });
        }
    }
    if config.replication == Replication::Sync {
        semi_sync(&mut c, &address(host, port)).await?;
    }
    session_settings(config, &mut c).await?;
    Ok(c)
}

/// What makes the server refuse writes (`read_only ON`, `super_read_only ON`), if anything.
async fn read_only(c: &mut MySqlConnection) -> Result<Option<String>> {
    let what = "asking whether the server takes writes";
    let on = variables_on(c, sql::READ_ONLY, what).await?;
    Ok((!on.is_empty()).then(|| on.join(", ")))
}

/// The variables of `statement`'s answer (a `SHOW GLOBAL VARIABLES` or `STATUS`: name, value)
/// that are on, each as `name VALUE`; `Err` for a statement the server refused.
async fn variables_on(c: &mut MySqlConnection, statement: &str, what: &str) -> Result<Vec<String>> {
    let rows = sqlx::query(statement)
        .fetch_all(&mut *c)
        .await
        .map_err(|e| mysql_error(what, e))?;
    let mut on = Vec::new();
    for row in rows {
        let name: Vec<u8> = row.try_get(0).map_err(|e| decode(what, e))?;
        let value: Vec<u8> = row.try_get(1).map_err(|e| decode(what, e))?;
        let value = String::from_utf8_lossy(&value);
        // ON, or MariaDB 11's further modes of read_only (NO_LOCK, NO_LOCK_NO_ADMIN).
        if !(value.eq_ignore_ascii_case("OFF") || value == "0" || value.is_empty()) {
            on.push(format!("{} {value}", String::from_utf8_lossy(&name)));
        }
    }
    Ok(on)
}

/// `replication=sync`'s check of the server at `addr`: semi-synchronous replication on
/// (`Protocol` otherwise: a setting) and working now (`Unavailable` otherwise: it heals once a
/// replica acknowledges again).
async fn semi_sync(c: &mut MySqlConnection, addr: &str) -> Result<()> {
    let what = "asking whether the primary waits for a replica";
    if variables_on(c, sql::SEMI_SYNC_ENABLED, what).await?.is_empty() {
        return Err(LockError::Protocol(format!(
            "mysql: the primary {addr} does not wait for a replica (semi-synchronous replication is off: \
             rpl_semi_sync_master_enabled, or MySQL's rpl_semi_sync_source_enabled, is OFF or missing): a \
             failover to a replica could hand a lock and its fencing token out twice. Turn it on, or add \
             replication=async to the URL to accept that"
        )));
    }
    if variables_on(c, sql::SEMI_SYNC_STATUS, what).await?.is_empty() {
        return Err(LockError::Unavailable {
            message: format!(
                "mysql: the primary {addr} has semi-synchronous replication on but not working \
                 (Rpl_semi_sync_master_status OFF: no replica acknowledged in time, and it goes on alone \
                 until one catches up): its commits would not be on a replica when answered"
            ),
            source: None,
        });
    }
    Ok(())
}

/// The session settings every statement expects: UTC, the lock wait, read committed, and an end
/// to a session left idle in a transaction.
async fn session_settings(config: &Config, c: &mut MySqlConnection) -> Result<()> {
    let lock_wait = config.request_timeout.as_secs().max(1);
    sqlx::query(sql::SESSION_SETTINGS)
        .bind(lock_wait)
        .execute(&mut *c)
        .await
        .map_err(|e| mysql_error("setting up the session", e))?;
    sqlx::Executor::execute(&mut *c, sql::ISOLATION)
        .await
        .map_err(|e| mysql_error("setting up the session", e))?;
    // A connection that went silent mid-transaction (a flow a firewall dropped) would keep its
    // row locks on the server until the session ends: MariaDB ends a session idle in a
    // transaction after `idle_transaction_timeout`; MySQL, which has no such setting, ends the
    // session after `wait_timeout` idle (the steps' connection is then opened again at its next
    // use).
    let idle = (lock_wait * 3).max(10);
    if let Err(e) = sqlx::query(sql::IDLE_TRANSACTION_TIMEOUT)
        .bind(idle)
        .execute(&mut *c)
        .await
    {
        if server_number(&e) != Some(UNKNOWN_SYSTEM_VARIABLE) {
            return Err(mysql_error("setting up the session", e));
        }
        sqlx::query(sql::WAIT_TIMEOUT)
            .bind(idle.max(30))
            .execute(&mut *c)
            .await
            .map_err(|e| mysql_error("setting up the session", e))?;
    }
    Ok(())
}

/// `err`, met opening a connection to `host:port`, as a [`LockError`]. With TLS and a client
/// certificate, a failure that looks like an outage may be the server refusing the certificate
/// with an alert the connection's reset hid: `cert_check.rs` asks the server again, and a
/// refusal is `Denied`.
async fn connect_error(config: &Config, host: &str, port: u16, what: &str, err: sqlx::Error) -> LockError {
    let e = mysql_error(what, err);
    #[cfg(feature = "tls")]
    if let (LockError::Unavailable { .. }, Some(_), Some(files)) = (&e, &config.client, &config.tls_files) {
        if let Some(failure) = crate::cert_check::refused(host, port, files).await {
            return failure.denied(&format!("mysql: {what}"), None, &e.to_string());
        }
    }
    #[cfg(not(feature = "tls"))]
    let _ = (config, host, port);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_writable_host_names_each_host_and_heals() {
        let url = locksmith_core::driver::BackendUrl::parse("mysql://app:pw@db1,db2:3307/locks").unwrap();
        let config = Config::parse(&url).unwrap();
        let e = none_writable(
            &config,
            vec![
                LockError::Unavailable {
                    message: "mysql: db1:3306 takes no writes (read_only ON): a replica".into(),
                    source: None,
                },
                timeout("connecting to db2:3307", Duration::from_secs(1)),
            ],
        );
        let LockError::Unavailable { message, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(message.contains("db1:3306 takes no writes (read_only ON)"), "{message}");
        assert!(message.contains("connecting to db2:3307 took longer"), "{message}");
        assert!(!message.contains("pw"), "{message}");
        let e = none_writable(
            &config,
            vec![LockError::Denied("a".into()), LockError::Denied("b".into())],
        );
        assert!(matches!(e, LockError::Denied(_)), "{e:?}");
        assert_eq!(address("::1", 3306), "[::1]:3306");
    }
}
