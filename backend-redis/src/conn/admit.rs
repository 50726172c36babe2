//! What connecting checks before a server is used, besides that it answers ([`Node::ping`]):
//!
//! - **It speaks TLS when the URL asks for it.** A plain Redis never answers a TLS greeting (it
//!   waits for the end of a line that never comes), so `rediss://` at a plain server would only
//!   time out, an outage retried for ever. When the TLS ping has not finished after a moment,
//!   [`plain_answer`] asks the same address in plain RESP; a RESP answer means the server speaks
//!   no TLS: [`LockError::Denied`], at once.
//! - **It cannot evict lock keys.** A master whose `maxmemory-policy` is not `noeviction` drops
//!   keys when it reaches `maxmemory`: `allkeys-*` any key, `volatile-*` those with a TTL, which
//!   every lock key has (so `volatile-lru` evicts them first). A held lock would disappear
//!   without its holder being told, and be granted again: [`eviction`] refuses such a master
//!   ([`LockError::Denied`], naming the setting and the fix) unless the URL says
//!   `eviction=allow`, which logs a warning instead. The policy is read with `CONFIG GET` or,
//!   where `CONFIG` is disabled or not permitted, from `INFO memory`; every master is checked (the
//!   server, the Sentinel's master, each Cluster master, each member of a quorum that answers).

use std::collections::HashMap;
use std::time::Duration;

use locksmith_core::driver::permanent::TlsFailure;
use locksmith_core::{LockError, Result};
use redis::{ErrorKind, RedisError, RedisResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{Config, Topology};
use crate::conn::link::Conn;
use crate::conn::node::Node;
use crate::error::map_error;

/// Resolves with [`LockError::Denied`] if `node` is a plain Redis where the URL asks for TLS;
/// never resolves otherwise (a TLS server, no answer, not a single server, no TLS asked for). It
/// asks only once the TLS ping has had `connect_timeout / 4` (at most 500 ms) to finish, so that
/// a TLS server that answers at once never sees the plain question.
pub(crate) async fn plain_answer(node: &Node, config: &Config) -> LockError {
    if config.tls.is_none() || config.topology != Topology::Servers {
        return std::future::pending().await;
    }
    tokio::time::sleep((config.connect_timeout / 4).min(Duration::from_millis(500))).await;
    match speaks_plain_resp(&node.addr).await {
        Some(reply) => TlsFailure::NoTls.denied(
            "connecting on redis",
            Some(&node.addr),
            &format!("it answered a plain PING with {reply:?}"),
        ),
        None => std::future::pending().await,
    }
}

/// The first line of the answer to a plain `PING` at `addr`, if it is a RESP answer (`+PONG`,
/// `-NOAUTH …`, `-ERR …`).
async fn speaks_plain_resp(addr: &str) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.write_all(b"PING\r\n").await.ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 128];
    while !reply.contains(&b'\n') && reply.len() < 512 {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
    }
    let line = reply.split(|b| *b == b'\r' || *b == b'\n').next()?;
    let resp = matches!(line.first(), Some(b'+' | b'-')) && line.iter().all(|b| b.is_ascii_graphic() || *b == b' ');
    resp.then(|| String::from_utf8_lossy(line).into_owned())
}

/// Checks that no master of `node` may evict keys (see the module docs); with `eviction=allow`
/// only warns.
pub(crate) async fn eviction(node: &Node, config: &Config) -> Result<()> {
    let cluster = node.link.is_cluster();
    let mut masters = Vec::new();
    if cluster {
        // A cluster whose map cannot be read now (a master failing over, a node the seed list
        // names that is down) is checked where it can be: connecting must not wait for the whole
        // cluster to be healthy, which the lockers ride out on their own.
        match node.link.slot_owners().await {
            Ok(owners) => {
                for (_, _, host, port) in owners {
                    if !masters.contains(&(host.clone(), port)) {
                        masters.push((host, port));
                    }
                }
            }
            Err(e) => {
                tracing::debug!(addr = %node.addr, error = %e, "redis: could not read the cluster's masters to check their maxmemory-policy now");
                return Ok(());
            }
        }
    }
    let mut checks = Vec::new();
    if masters.is_empty() {
        let conn = node
            .link
            .conn()
            .await
            .map_err(|e| map_error(e, "connecting", &node.addr))?;
        checks.push((node.addr.clone(), conn));
    } else {
        for master in &masters {
            match node.link.node_conn(master, false).await {
                Ok(conn) => checks.push((format!("{}:{}", master.0, master.1), conn)),
                // A master that does not answer now fails its own leases, not the connect.
                Err(e) => {
                    tracing::debug!(addr = %format!("{}:{}", master.0, master.1), error = %e, "redis: a cluster master's maxmemory-policy could not be checked now")
                }
            }
        }
    }
    for (addr, mut conn) in checks {
        let policy = match policy(&mut conn).await {
            Ok(policy) => policy,
            Err(e) if cluster && !refused(&e) => {
                tracing::debug!(%addr, error = %e, "redis: a cluster master's maxmemory-policy could not be read now");
                continue;
            }
            Err(e) if e.kind() == ErrorKind::Io || e.is_timeout() || e.is_connection_dropped() => {
                return Err(map_error(e, "reading maxmemory-policy", &addr))
            }
            Err(e) => {
                tracing::warn!(%addr, error = %e, "could not read the server's maxmemory-policy (CONFIG GET and INFO memory refused): make sure it is noeviction, or lock keys may be evicted");
                continue;
            }
        };
        match policy.as_deref() {
            Some("noeviction") | None => {}
            Some(policy) if config.allow_eviction => {
                tracing::warn!(%addr, policy, "this redis may evict lock keys (maxmemory-policy is not noeviction; eviction=allow): a held lock can disappear without its holder being told, and be granted again");
            }
            Some(policy) => {
                return Err(LockError::Denied(format!(
                    "connecting on redis at {addr}: its maxmemory-policy is {policy}, which evicts keys \
                     when memory runs out (lock keys have a TTL: volatile-* evicts them too), so a held \
                     lock could vanish and be granted twice: run `CONFIG SET maxmemory-policy \
                     noeviction` there (and in its config file), or add eviction=allow to the URL to \
                     accept the risk"
                )))
            }
        }
    }
    Ok(())
}

/// The server's `maxmemory-policy`: `CONFIG GET`, or `INFO memory` where `CONFIG` is refused;
/// `None` when neither says.
async fn policy(conn: &mut Conn) -> RedisResult<Option<String>> {
    let config: RedisResult<HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    match config {
        Ok(answer) => {
            if let Some(policy) = answer.get("maxmemory-policy") {
                return Ok(Some(policy.clone()));
            }
        }
        Err(e) if refused(&e) => {}
        Err(e) => return Err(e),
    }
    let info: String = redis::cmd("INFO").arg("memory").query_async(conn).await?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("maxmemory_policy:"))
        .map(|policy| policy.trim().to_owned()))
}

/// Whether the server refused the command itself (unknown or renamed away, or not permitted),
/// as opposed to not answering.
fn refused(e: &RedisError) -> bool {
    !(e.kind() == ErrorKind::Io || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal())
}
