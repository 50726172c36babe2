//! The TLS set-up every backend shares (Cargo feature `tls`): the crypto provider rustls runs on,
//! and a client configuration from a URL's `ca=`, `cert=` and `key=` ([`TlsFiles`]).
//!
//! rustls needs one process-wide crypto provider and cannot pick one by itself when several are
//! compiled in (a program's other crates may bring `ring`). Every backend uses aws-lc-rs, unless
//! the program installed a provider first: [`install_provider`] is called before any handshake.
//! A backend whose client library builds its own TLS configuration (etcd-client, redis-rs)
//! calls only that; one that makes handshakes itself (PostgreSQL's `TlsConnect`, the probes that
//! name a refused certificate on etcd and ZooKeeper) builds its configuration with
//! [`client_config`], so that every backend reads the same files the same way and names the same
//! mistakes the same way.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use super::url::TlsFiles;

/// What is wrong with a URL's TLS files; its message names the option (`ca=: …`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsSetupError {
    /// `ca=` is not a PEM bundle rustls accepts, or holds no certificate.
    #[error("ca=: {0}")]
    Ca(String),
    /// No `ca=`, and the system has no root certificate to verify the server with.
    #[error("no ca= and no system root certificates to verify the server with")]
    NoRoots,
    /// `cert=` or `key=` is not PEM, or the two do not go together.
    #[error("{0}")]
    Identity(String),
}

/// Installs aws-lc-rs as rustls's process-wide crypto provider, unless the program installed one
/// (then that one stays). Cheap after the first call.
///
/// # Examples
///
/// ```
/// locksmith_core::driver::tls::install_provider();
/// assert!(rustls::crypto::CryptoProvider::get_default().is_some());
/// ```
pub fn install_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

/// A rustls client configuration from `files`: the server verified against `ca=` (else the
/// system's roots), with the client certificate `cert=`/`key=` if given. Installs the provider
/// ([`install_provider`]) first. The server's name is the caller's to give at each handshake
/// (`files.server_name`, else the host).
///
/// # Errors
///
/// [`TlsSetupError`] when `ca=` holds no certificate rustls accepts, when there is no `ca=` and
/// the system has no roots, or when `cert=`/`key=` are not PEM or do not match. Nothing here
/// touches the network.
///
/// # Examples
///
/// ```
/// use locksmith_core::driver::tls::{client_config, TlsSetupError};
/// use locksmith_core::driver::url::TlsFiles;
///
/// let files = TlsFiles { ca: Some(b"not a certificate".to_vec()), ..TlsFiles::default() };
/// assert!(matches!(client_config(&files), Err(TlsSetupError::Ca(_))));
/// ```
pub fn client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, TlsSetupError> {
    install_provider();
    let mut roots = RootCertStore::empty();
    match &files.ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| TlsSetupError::Ca(format!("not a PEM certificate bundle: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| TlsSetupError::Ca(format!("a certificate rustls refuses: {e}")))?;
            }
            if roots.is_empty() {
                return Err(TlsSetupError::Ca("no certificate in the file".into()));
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if roots.is_empty() {
                return Err(TlsSetupError::NoRoots);
            }
        }
    }
    let builder = ClientConfig::builder().with_root_certificates(roots);
    let config = match &files.identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| TlsSetupError::Identity(format!("cert=: not a PEM certificate: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| TlsSetupError::Identity(format!("key=: not a PEM private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsSetupError::Identity(format!("cert= and key=: {e}")))?
        }
    };
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_ca_file_is_named() {
        let files = TlsFiles {
            ca: Some(Vec::new()),
            ..TlsFiles::default()
        };
        let e = client_config(&files).unwrap_err();
        assert_eq!(e.to_string(), "ca=: no certificate in the file");
    }

    #[test]
    fn a_key_without_pem_is_named() {
        let files = TlsFiles {
            ca: None,
            identity: Some((b"x".to_vec(), b"y".to_vec())),
            server_name: None,
        };
        match client_config(&files) {
            // A machine without system roots stops before the identity.
            Err(TlsSetupError::NoRoots) => {}
            Err(e) => assert!(
                e.to_string().starts_with("cert=") || e.to_string().starts_with("key="),
                "{e}"
            ),
            Ok(_) => panic!("a client identity that is not PEM was accepted"),
        }
    }
}
