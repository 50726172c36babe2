//! Whether a MySQL or MariaDB server refuses our client certificate. With TLS 1.3 the server
//! checks the client's certificate after the client believes the handshake done, sends its alert
//! and closes; when the close's reset reaches the client before the alert is read, sqlx reports
//! only "connection reset by peer", which an outage also gives (seen in every run of
//! `tests/secure.rs` on one machine). So when connecting over TLS with `cert=` failed as an
//! outage, [`refused`] makes one connection of its own: the server's greeting, an `SSLRequest`,
//! a TLS handshake with the URL's files, then a read. An alert about our certificate is an answer
//! no retry changes ([`locksmith_core::LockError::Denied`]). As etcd's `conn/cert_check.rs`.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use locksmith_core::driver::permanent::{tls_failure_in, TlsFailure};
use locksmith_core::driver::url::TlsFiles;
use rustls::pki_types::ServerName;

/// How long the probe may take at each step.
const PROBE: Duration = Duration::from_secs(2);

/// The client capabilities of the `SSLRequest`: `CLIENT_LONG_PASSWORD`, `CLIENT_PROTOCOL_41`,
/// `CLIENT_SSL`, `CLIENT_SECURE_CONNECTION`, `CLIENT_PLUGIN_AUTH`.
const CAPABILITIES: u32 = 0x1 | 0x200 | 0x800 | 0x8000 | 0x8_0000;

/// [`TlsFailure::ClientCertificateRefused`] if the server at `host:port` answers a TLS
/// connection made with `tls` with an alert about our certificate; `None` if it does not, or if
/// the probe cannot tell (no `ca=`: the roots are then the client's business, not the probe's).
pub(crate) async fn refused(host: &str, port: u16, tls: &TlsFiles) -> Option<TlsFailure> {
    let (host, tls) = (host.to_owned(), tls.clone());
    tokio::task::spawn_blocking(move || probe(&host, port, &tls))
        .await
        .ok()
        .flatten()
        .filter(|f| *f == TlsFailure::ClientCertificateRefused)
}

/// What the server says to a TLS connection made with `tls`.
fn probe(host: &str, port: u16, tls: &TlsFiles) -> Option<TlsFailure> {
    tls.ca.as_ref()?;
    let config = locksmith_core::driver::tls::client_config(tls).ok()?;
    let name = ServerName::try_from(tls.server_name.clone().unwrap_or_else(|| host.to_owned())).ok()?;
    let mut conn = rustls::ClientConnection::new(config, name).ok()?;
    let addr = (host, port).to_socket_addrs().ok()?.next()?;
    let mut sock = TcpStream::connect_timeout(&addr, PROBE).ok()?;
    sock.set_read_timeout(Some(PROBE)).ok()?;
    sock.set_write_timeout(Some(PROBE)).ok()?;
    // The server's greeting (its first packet), then our request to go on in TLS.
    let mut header = [0u8; 4];
    sock.read_exact(&mut header).ok()?;
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let mut greeting = vec![0u8; len];
    sock.read_exact(&mut greeting).ok()?;
    if greeting.first() != Some(&10) {
        return None; // an error packet (too many connections, a blocked host), or no MySQL
    }
    let mut request = vec![32, 0, 0, header[3].wrapping_add(1)];
    request.extend_from_slice(&CAPABILITIES.to_le_bytes());
    request.extend_from_slice(&(16u32 << 20).to_le_bytes());
    request.push(45); // utf8mb4_general_ci
    request.extend_from_slice(&[0u8; 23]);
    sock.write_all(&request).ok()?;
    let mut stream = rustls::Stream::new(&mut conn, &mut sock);
    let said = |e: std::io::Error| tls_failure_in(&e.to_string()).or_else(|| tls_failure_in(&format!("{e:?}")));
    // A packet of ours once the handshake is done (its content does not matter: the server
    // refuses our certificate before it reads it), then whatever comes back: only an error tells.
    if let Err(e) = stream.write_all(&[1, 0, 0, 2, 0]).and_then(|()| stream.flush()) {
        return said(e);
    }
    let mut buf = [0u8; 256];
    stream.read(&mut buf).err().and_then(said)
}
