//! Why a `zks://` session cannot be established, when the reason is TLS that cannot heal.
//!
//! The ZooKeeper client tries its servers again and again and keeps each failure to itself
//! (a trace line), so a certificate the CA does not vouch for, or a server without TLS, would
//! look like servers that never answer: `Unavailable` after the connect timeout, retried for
//! ever. When the session is not there after a moment, [`refused`] makes one TLS handshake of
//! its own with each server, with the URL's CA and client certificate, and names the failure
//! (with [`locksmith_core::driver::permanent`]) when TLS fails for good on every server. A
//! handshake that met a closed or reset connection asks the server the four-letter word `srvr`
//! in plain text: a plain ZooKeeper's answer means it speaks no TLS.

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::permanent::{self, TlsFailure};
use locksmith_core::driver::url::TlsFiles;
use locksmith_core::LockError;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Resolves with [`LockError::Denied`] once a handshake with every server of `connect_string`
/// failed in a way no retry changes; never resolves otherwise. It starts after `delay`, so that a
/// session established at once costs no extra connection.
pub(crate) async fn refused(tls: &TlsFiles, connect_string: &str, what: &str, delay: Duration) -> LockError {
    tokio::time::sleep(delay).await;
    let Some(config) = client_config(tls) else {
        return std::future::pending().await;
    };
    let mut first = None;
    for server in connect_string.split(',') {
        match handshake(config.clone(), server).await {
            Some((failure, detail)) => {
                first.get_or_insert((failure, server.to_owned(), detail));
            }
            None => return std::future::pending().await,
        }
    }
    match first {
        Some((failure, server, detail)) => failure.denied(what, Some(&server), &detail),
        None => std::future::pending().await,
    }
}

/// The TLS failure of one handshake with `server` (`host:port`), if there is one that cannot
/// heal. A server that does not accept the connection, or does not answer in a second, says
/// nothing.
async fn handshake(config: Arc<ClientConfig>, server: &str) -> Option<(TlsFailure, String)> {
    let (host, _) = server.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_owned()).ok()?;
    let limit = Duration::from_secs(1);
    let tcp = tokio::time::timeout(limit, tokio::net::TcpStream::connect(server))
        .await
        .ok()?
        .ok()?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let result = match tokio::time::timeout(limit, connector.connect(name, tcp)).await.ok()? {
        Err(e) => Err(e),
        // TLS 1.3: the server judges our certificate after our side of the handshake is done,
        // and says so with an alert at the first read.
        Ok(mut stream) => {
            let mut byte = [0u8; 1];
            match tokio::time::timeout(Duration::from_millis(300), stream.read(&mut byte)).await {
                Ok(Err(e)) => Err(e),
                _ => Ok(()),
            }
        }
    };
    let e = result.err()?;
    match permanent::tls_failure(&e) {
        Some(failure) => Some((failure, e.to_string())),
        // A plain server closes a connection that opens with a TLS greeting, and the handshake
        // may see that as a reset, as in an outage: ask it in plain text.
        None => plain_answer(server).await.map(|answer| {
            (
                TlsFailure::NoTls,
                format!("{e}; it answered a plain srvr with {answer:?}"),
            )
        }),
    }
}

/// The first line of a plain ZooKeeper's answer to the four-letter word `srvr` at `server`, if
/// it answers as one does (its version, or that `srvr` is not on its whitelist).
async fn plain_answer(server: &str) -> Option<String> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(server).await.ok()?;
        stream.write_all(b"srvr").await.ok()?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 512];
        while answer.len() < 4096 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
        let text = String::from_utf8_lossy(&answer);
        let line = text.lines().next()?.to_owned();
        (line.starts_with("Zookeeper version") || line.contains("is not executed because it is not in the whitelist"))
            .then_some(line)
    };
    tokio::time::timeout(Duration::from_secs(1), ask).await.ok()?
}

/// The client configuration the ZooKeeper client makes of the same files.
fn client_config(tls: &TlsFiles) -> Option<Arc<ClientConfig>> {
    // zks:// requires `ca=` (the URL's parser says so): without it there is nothing to probe with.
    tls.ca.as_ref()?;
    locksmith_core::driver::tls::client_config(tls).ok()
}

#[cfg(test)]
mod tests {
    use locksmith_core::conformance::env_url;

    use super::*;

    fn server(url: &str) -> String {
        let rest = url.split_once("://").unwrap().1;
        let rest = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
        rest.split(['?', '/']).next().unwrap().to_owned()
    }

    /// A plain ZooKeeper answers `srvr` as one; the TLS port does not: a handshake that met a
    /// reset (how a plain server's close of a TLS greeting can look) is told apart from an outage.
    #[tokio::test]
    async fn a_plain_server_is_told_from_a_tls_one() {
        let plain = server(&env_url("LOCKSMITH_TEST_ZK"));
        assert!(plain_answer(&plain).await.is_some(), "{plain}");
        let secure = server(&env_url("LOCKSMITH_TEST_ZK_SECURE"));
        assert!(plain_answer(&secure).await.is_none(), "{secure}");
        assert!(plain_answer("127.0.0.1:1").await.is_none());
    }
}
