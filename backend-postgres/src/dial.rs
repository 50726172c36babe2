//! Opening a connection on a socket of our own (tokio-postgres's `connect_raw`), so that the
//! socket has an option tokio-postgres does not set: `SO_LINGER` 0, a close that resets the
//! connection and drops what it had not delivered yet.
//!
//! Why: a connection is dropped when a request on it goes unanswered (`conn/link.rs`), and the
//! request's clean-up then goes over a new connection. After a normal close, a statement still
//! held up in the network (a partition) would be delivered once the network healed, after that
//! clean-up, and undo it: a queue step that puts a gone waiter back in the queue, to be granted a
//! lock that nobody uses until its entry's lease runs out. With a reset it is never delivered.
//! The price: a statement not yet sent when its process exits (a clean-up whose bounded wait ran
//! out) is dropped with it; what it would have cleaned up expires with its lease.
//!
//! The rest is what tokio-postgres's own `connect` did for the URL's settings: each address of
//! each host in turn, the first one that takes writes when there are several hosts (a primary and
//! its standbys), TCP keep-alives, no Nagle delay; and `connect_timeout` bounds the whole, each
//! host and address with its share of it (tokio-postgres gave each address all of it).
//!
//! A socket is closed at once, unanswered requests and all, only where the connection is given up
//! on (`conn::Connected::abandon`): dropping a client with requests unanswered leaves its
//! connection's task waiting for the answers.

use std::net::SocketAddr;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{CancelToken, Client, SimpleQueryMessage};

use locksmith_core::{LockError, Result};

use crate::config::{Config, Connector, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_RETRIES};
use crate::error::{pg_error, timeout};

/// The stream under a connection: TLS or not, as the URL says.
pub(crate) type Stream = <Connector as MakeTlsConnect<TcpStream>>::Stream;

/// A connection's I/O half: it must be polled (spawned) for its [`Client`] to be answered.
pub(crate) type Connection = tokio_postgres::Connection<TcpStream, Stream>;

/// Where a connection went: the host it was opened to (for TLS) and the address it reached
/// (where a cancel request for its session must go).
#[derive(Debug, Clone)]
pub(crate) struct Server {
    host: String,
    addr: SocketAddr,
}

/// Connects to the URL's server within the connect timeout: its one host, or the first of its
/// hosts that takes writes. The connection's half is returned unpolled, for the caller to drive.
pub(crate) async fn open(config: &Config) -> Result<(Client, Connection, Server)> {
    let deadline = Instant::now() + config.connect_timeout;
    tokio::time::timeout_at(deadline, open_by(config, deadline))
        .await
        .map_err(|_| timeout("connecting", config.connect_timeout))?
}

/// [`open`] by `deadline`: each address of each host in turn. Each host gets an even share of
/// the time left, and each of its addresses an even share of the host's: a primary cut off in
/// silence (its packets dropped, or a server that accepts and never answers) must leave time to
/// try its standbys, and a silent address the host's others.
async fn open_by(config: &Config, deadline: Instant) -> Result<(Client, Connection, Server)> {
    let several = config.hosts.len() > 1;
    let mut failed = None;
    for (i, (host, port)) in config.hosts.iter().enumerate() {
        let host_deadline = share_of(deadline, config.hosts.len() - i);
        let host_share = host_deadline.saturating_duration_since(Instant::now());
        let lookup = tokio::time::timeout_at(host_deadline, tokio::net::lookup_host((host.as_str(), *port)));
        let addrs: Vec<SocketAddr> = match lookup.await {
            Ok(Ok(addrs)) => addrs.collect(),
            Ok(Err(e)) => {
                failed = Some(LockError::unavailable(
                    format!("postgres: looking up {host}:{port}: {e}"),
                    e,
                ));
                continue;
            }
            Err(_) => {
                failed = Some(timeout("looking up a host", host_share));
                continue;
            }
        };
        for (j, addr) in addrs.iter().enumerate() {
            let server = Server {
                host: host.clone(),
                addr: *addr,
            };
            let by = share_of(host_deadline, addrs.len() - j);
            // The time this address is given, to the millisecond, for the error (measured when
            // the timeout fired, nothing would be left: "took longer than 0ns").
            let share = by.saturating_duration_since(Instant::now()) + Duration::from_micros(500);
            let share = Duration::from_millis(u64::try_from(share.as_millis()).unwrap_or(u64::MAX));
            let opened = tokio::time::timeout_at(by, open_on(config, &server, several))
                .await
                .unwrap_or_else(|_| Err(timeout("connecting", share)));
            match opened {
                Ok((client, connection)) => return Ok((client, connection, server)),
                Err(e) => {
                    tracing::debug!(%host, %addr, error = %e, "postgres: could not connect to this address");
                    failed = Some(e);
                }
            }
        }
    }
    Err(failed.unwrap_or_else(|| LockError::InvalidOption("postgres: the URL names no host".into())))
}

/// The deadline of the first of `parts` even shares of the time left before `deadline`.
fn share_of(deadline: Instant, parts: usize) -> Instant {
    let left = deadline.saturating_duration_since(Instant::now());
    Instant::now() + left / u32::try_from(parts).unwrap_or(u32::MAX).max(1)
}

/// Sends a cancel request for `token`'s session to `server`, on a socket that closes normally:
/// the request is all it carries, and TCP must deliver it after the close. Not bounded in time:
/// the caller bounds it.
pub(crate) async fn cancel(config: &Config, server: &Server, token: &CancelToken) -> Result<()> {
    let socket = connect_to(server).await?;
    let tls = make_tls(config, server)?;
    token
        .cancel_query_raw(socket, tls)
        .await
        .map_err(|e| pg_error("cancelling a request", e))
}

/// One host: the socket, the session's start-up, and with `must_write` the check that the server
/// is not a standby (read only).
async fn open_on(config: &Config, server: &Server, must_write: bool) -> Result<(Client, Connection)> {
    let socket = socket_to(server).await?;
    let tls = make_tls(config, server)?;
    let (client, mut connection) = config
        .client()
        .connect_raw(socket, tls)
        .await
        .map_err(|e| pg_error("connecting", e))?;
    if must_write {
        // The connection is driven here until the answer is in; its caller drives it after.
        let read_only = tokio::select! {
            rows = client.simple_query(include_str!("sql/read_only.sql")) => rows,
            ended = &mut connection => {
                let why = ended.err().map_or_else(|| "closed".to_owned(), |e| e.to_string());
                return Err(LockError::Unavailable {
                    message: format!("postgres: the connection ended during its start-up: {why}"),
                    source: None,
                });
            }
        }
        .map_err(|e| pg_error("asking whether the server takes writes", e))?;
        let on = read_only.iter().any(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0) == Some("on"),
            _ => false,
        });
        if on {
            return Err(LockError::Unavailable {
                message: format!("postgres: {} ({}) is a standby (read only)", server.host, server.addr),
                source: None,
            });
        }
    }
    Ok((client, connection))
}

/// A TCP connection to `server` with our options: no Nagle delay, TCP keep-alives (a peer gone in
/// silence ends an idle connection in about a minute), and `SO_LINGER` 0.
async fn socket_to(server: &Server) -> Result<TcpStream> {
    let socket = connect_to(server).await?;
    let options = || -> std::io::Result<()> {
        let socket = SockRef::from(&socket);
        let keepalive = TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_RETRIES);
        socket.set_tcp_keepalive(&keepalive)?;
        socket.set_linger(Some(Duration::ZERO))
    };
    options().map_err(|e| LockError::unavailable(format!("postgres: setting a socket's options: {e}"), e))?;
    Ok(socket)
}

/// A plain TCP connection to `server`, without Nagle's delay (not bounded in time: the callers
/// bound it).
async fn connect_to(server: &Server) -> Result<TcpStream> {
    let failed = |e: std::io::Error| {
        let message = format!("postgres: connecting to {} ({}): {e}", server.host, server.addr);
        LockError::unavailable(message, e)
    };
    let socket = TcpStream::connect(server.addr).await.map_err(failed)?;
    socket.set_nodelay(true).map_err(failed)?;
    Ok(socket)
}

/// The TLS handshake for `server` (a no-op with TLS off).
fn make_tls(config: &Config, server: &Server) -> Result<<Connector as MakeTlsConnect<TcpStream>>::TlsConnect> {
    let mut connector = config.connector.clone();
    MakeTlsConnect::<TcpStream>::make_tls_connect(&mut connector, &server.host)
        .map_err(|e| LockError::InvalidOption(format!("postgres: TLS for host {:?}: {e}", server.host)))
}
