//! Whether an etcd refuses our client certificate (or the lack of one). With TLS 1.3 the server
//! sends its alert after the client believes the handshake done, and etcd's client reports it
//! either among the causes of a "transport error" or, when the connection's close wins the race,
//! only as "connection closed", which an outage also gives. So when connecting over TLS failed as
//! an outage, [`refused`] makes one TLS connection of its own to each endpoint with the URL's
//! files, sends the HTTP/2 preface and reads: an alert about our certificate is an answer no
//! retry changes ([`locksmith_core::LockError::Denied`]).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use locksmith_core::driver::permanent::{tls_failure_in, TlsFailure};
use locksmith_core::driver::url::TlsFiles;
use rustls::pki_types::ServerName;

/// How long the probe of one endpoint may take.
const PROBE: Duration = Duration::from_secs(2);

/// [`TlsFailure::ClientCertificateRefused`] if an endpoint answers our TLS connection with an
/// alert about our certificate; `None` if none does, or if the probe cannot tell (no `ca=`: the
/// system's roots are the client's business, not the probe's).
pub(crate) async fn refused(endpoints: &[String], tls: &TlsFiles) -> Option<TlsFailure> {
    let (endpoints, tls) = (endpoints.to_vec(), tls.clone());
    tokio::task::spawn_blocking(move || {
        endpoints
            .iter()
            .find_map(|e| probe(e, &tls).filter(|f| *f == TlsFailure::ClientCertificateRefused))
    })
    .await
    .ok()
    .flatten()
}

/// What one endpoint (`https://host:port`) says to a TLS connection made with `tls`.
fn probe(endpoint: &str, tls: &TlsFiles) -> Option<TlsFailure> {
    let addr = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest)
        .trim_end_matches('/');
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    // Without `ca=` the system's roots are the client's business, not the probe's.
    tls.ca.as_ref()?;
    let config = locksmith_core::driver::tls::client_config(tls).ok()?;
    let name = ServerName::try_from(tls.server_name.clone().unwrap_or_else(|| host.to_owned())).ok()?;
    let mut conn = rustls::ClientConnection::new(config, name).ok()?;
    let socket_addr = addr.to_socket_addrs().ok()?.next()?;
    let mut sock = TcpStream::connect_timeout(&socket_addr, PROBE).ok()?;
    sock.set_read_timeout(Some(PROBE)).ok()?;
    sock.set_write_timeout(Some(PROBE)).ok()?;
    let mut stream = rustls::Stream::new(&mut conn, &mut sock);
    let said = |e: std::io::Error| tls_failure_in(&e.to_string()).or_else(|| tls_failure_in(&format!("{e:?}")));
    if let Err(e) = stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .and_then(|()| stream.flush())
    {
        return said(e);
    }
    // Whatever the server sends first (its settings frame) or its alert: only an error tells.
    let mut buf = [0u8; 256];
    stream.read(&mut buf).err().and_then(said)
}
