//! What connecting checks before a server is used, besides that it answers ([`Node::ping`]):
//! that it speaks TLS when the URL asks for it. A plain Redis never answers a TLS greeting (it
//! waits for the end of a line that never comes), so `rediss://` at a plain server would only
//! time out, an outage retried for ever. When the TLS ping has not finished after a moment,
//! [`plain_answer`] asks the same address in plain RESP; a RESP answer means the server speaks no
//! TLS: [`LockError::Denied`], at once.

use std::time::Duration;

use locksmith_core::driver::permanent::TlsFailure;
use locksmith_core::LockError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{Config, Topology};
use crate::conn::node::Node;

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
