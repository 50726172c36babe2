//! The connection handle every request goes through, with the counters behind
//! [`crate::EtcdBackend::stats`], and the TLS settings of the connection ([`plain`]: telling a
//! server without TLS, or one that refuses our client certificate (`cert_check`), from an
//! outage).

#[cfg(feature = "tls")]
pub(crate) mod cert_check;
pub(crate) mod held;
pub(crate) mod plain;
pub(crate) mod session;
pub(crate) mod sweep;
pub(crate) mod sweeper;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
#[cfg(not(feature = "tls"))]
use locksmith_core::LockError;
use locksmith_core::Result;

/// What every request needs: the client, the time limit, and the counters.
#[derive(Clone)]
pub(crate) struct Conn {
    /// Shared: a `Client` holds a gRPC client per etcd service, and requests clone the `Conn`.
    pub client: std::sync::Arc<Client>,
    pub limit: Duration,
    pub stats: Arc<Stats>,
}

/// Requests a backend has sent (see [`crate::EtcdBackend::stats`]).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub txns: AtomicU64,
    pub keep_alives: AtomicU64,
    pub watch_requests: AtomicU64,
}

/// TLS with the URL's files: its `ca` (else the system's roots), its client certificate, and the
/// name to verify the server's certificate against.
#[cfg(feature = "tls")]
pub(crate) fn with_tls(options: ConnectOptions, tls: &locksmith_core::driver::url::TlsFiles) -> Result<ConnectOptions> {
    use etcd_client::{Certificate, Identity, TlsOptions};
    locksmith_core::driver::tls::install_provider();
    let mut config = TlsOptions::new();
    config = match &tls.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
        None => config.with_native_roots(),
    };
    if let Some((cert, key)) = &tls.identity {
        config = config.identity(Identity::from_pem(cert, key));
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(options.with_tls(config))
}

#[cfg(not(feature = "tls"))]
pub(crate) fn with_tls(_: ConnectOptions, _: &locksmith_core::driver::url::TlsFiles) -> Result<ConnectOptions> {
    Err(LockError::InvalidOption(
        "etcds:// needs the `tls` feature of locksmith".into(),
    ))
}
