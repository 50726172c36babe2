//! Whether the servers of an `etcds://` URL speak no TLS at all. A plain etcd closes a
//! connection that opens with a TLS greeting, and the client reports what it saw, which may be
//! "tls handshake eof" (recognised by [`locksmith_core::driver::permanent`]) or a reset
//! connection, as an outage would be. So when connecting over TLS failed as an outage,
//! [`no_tls`] asks each endpoint in plain HTTP for `/version`: if every one answers as a plain
//! etcd, the URL is wrong, for good ([`locksmith_core::LockError::Denied`]).

use std::time::Duration;

use locksmith_core::driver::permanent::TlsFailure;
use locksmith_core::driver::url::TlsFiles;
use locksmith_core::LockError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `failed` (an error of connecting to `endpoints` over TLS with `tls`), or
/// [`LockError::Denied`] when it is an outage-like failure that no retry changes: every endpoint
/// answers in plain HTTP as an etcd does ([`no_tls`]), or one refuses our client certificate
/// (`cert_check`, with the `tls` feature).
pub(crate) async fn tls_failed(endpoints: &[String], tls: &TlsFiles, what: &str, failed: LockError) -> LockError {
    let failed = no_tls(endpoints, what, failed).await;
    if !matches!(failed, LockError::Unavailable { .. }) {
        return failed;
    }
    #[cfg(feature = "tls")]
    if let Some(refusal) = super::cert_check::refused(endpoints, tls).await {
        let server = endpoints
            .first()
            .map(|e| e.split_once("://").map_or(&**e, |(_, rest)| rest));
        return refusal.denied(what, server, &failed.to_string());
    }
    #[cfg(not(feature = "tls"))]
    let _ = tls;
    failed
}

/// `failed` (an error of connecting to `endpoints` over TLS), or [`LockError::Denied`] when it is
/// an outage and every endpoint answers in plain HTTP as an etcd does.
pub(crate) async fn no_tls(endpoints: &[String], what: &str, failed: LockError) -> LockError {
    if !matches!(failed, LockError::Unavailable { .. }) || endpoints.is_empty() {
        return failed;
    }
    let mut first = None;
    for endpoint in endpoints {
        match plain_version(endpoint).await {
            Some(status) => {
                first.get_or_insert(status);
            }
            None => return failed,
        }
    }
    let server = endpoints[0].split_once("://").map_or(&*endpoints[0], |(_, rest)| rest);
    let detail = format!("{failed}; it answered plain HTTP with {:?}", first.unwrap_or_default());
    TlsFailure::NoTls.denied(what, Some(server), &detail)
}

/// The status line of a plain `GET /version` at `endpoint` (`https://host:port`), if the answer is
/// an etcd's (a JSON body naming `etcdserver`).
async fn plain_version(endpoint: &str) -> Option<String> {
    let addr = endpoint.split_once("://").map_or(endpoint, |(_, rest)| rest);
    let addr = addr.trim_end_matches('/');
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET /version HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while answer.len() < 8192 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
        let text = String::from_utf8_lossy(&answer);
        let status = text.lines().next()?.to_owned();
        (status.starts_with("HTTP/1.1 200") && text.contains("\"etcdserver\"")).then_some(status)
    };
    tokio::time::timeout(Duration::from_secs(1), ask).await.ok()?
}

#[cfg(test)]
mod tests {
    use locksmith_core::conformance::env_url;

    use super::*;

    fn outage() -> LockError {
        LockError::Unavailable {
            message: "Connection reset by peer (os error 104)".into(),
            source: None,
        }
    }

    /// `https://host:port` of a test server's URL.
    fn endpoint(url: &str) -> String {
        let rest = url.split_once("://").unwrap().1;
        let rest = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
        format!("https://{}", rest.split(['?', '/']).next().unwrap())
    }

    /// An outage-like failure (a reset, which is what a plain etcd's close of a TLS greeting can
    /// look like) at a plain etcd is `Denied`; at a TLS etcd, or at no server, it stays as it was.
    #[tokio::test]
    async fn an_outage_at_a_plain_etcd_is_no_tls() {
        let plain = endpoint(&env_url("LOCKSMITH_TEST_ETCD"));
        let e = no_tls(&[plain.clone(), plain.clone()], "connecting", outage()).await;
        assert!(
            matches!(&e, LockError::Denied(m) if m.contains("does not speak TLS")),
            "{e:?}"
        );
        let secure = endpoint(&env_url("LOCKSMITH_TEST_ETCD_SECURE"));
        let e = no_tls(&[secure], "connecting", outage()).await;
        assert!(matches!(e, LockError::Unavailable { .. }), "{e:?}");
        let e = no_tls(&[plain, "https://127.0.0.1:1".into()], "connecting", outage()).await;
        assert!(matches!(e, LockError::Unavailable { .. }), "{e:?}");
    }
}
