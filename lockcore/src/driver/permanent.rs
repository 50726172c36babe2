//! Which connection failures cannot heal by waiting: TLS that cannot be established.
//!
//! A server that speaks no TLS where the URL asks for it, a certificate the given CA does not
//! vouch for, one issued for another name or expired, a client certificate the server refuses:
//! retrying changes none of these, so a backend reports them as [`LockError::Denied`] (the
//! command's exit 5) instead of [`LockError::Unavailable`], which `locksmith run`/`hold`/`elect`
//! and the library's connect retries would retry for ever. A refused or reset connection, a
//! timeout, a server starting, loading or failing over stay `Unavailable`.
//!
//! Every backend classifies the same way, with [`tls_failure`] (an error and its `source()`
//! chain) or [`tls_failure_in`] (a message: etcd's client hands TLS failures over inside a gRPC
//! status string), and words the error with [`TlsFailure::denied`].
//!
//! ```
//! use locksmith_core::driver::permanent::{tls_failure_in, TlsFailure};
//!
//! let f = tls_failure_in("Unavailable: invalid peer certificate: UnknownIssuer").unwrap();
//! assert_eq!(f, TlsFailure::Untrusted);
//! assert!(tls_failure_in("Connection refused (os error 111)").is_none());
//! ```

use std::error::Error;

use crate::LockError;

/// Why TLS with a server could not be established, where trying again cannot help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFailure {
    /// The server answered our TLS greeting in its plain protocol (or closed the connection
    /// during the handshake, or said it has no TLS).
    NoTls,
    /// The server's certificate is not signed by a CA we trust (`ca=`, or the system's roots).
    Untrusted,
    /// The server's certificate is not issued for the name we connected to.
    WrongName,
    /// The server's certificate has expired, or is not valid yet.
    Expired,
    /// The server refused our client certificate (or wanted one and got none).
    ClientCertificateRefused,
}

/// What the text of a failure says, in the words rustls, tokio-postgres, tonic and OpenSSL use,
/// in the order they are looked for (the more particular first).
const PATTERNS: &[(&str, TlsFailure)] = &[
    // tokio-postgres, after the server answered `N` to SSLRequest.
    ("server does not support tls", TlsFailure::NoTls),
    // rustls: a reply that is no TLS record (a RESP, HTTP/2 or other plain answer).
    ("received corrupt message", TlsFailure::NoTls),
    ("invalidcontenttype", TlsFailure::NoTls),
    ("wrong version number", TlsFailure::NoTls),
    // tokio-rustls/tonic: the server closed the connection in the middle of the handshake.
    ("tls handshake eof", TlsFailure::NoTls),
    ("eof during handshake", TlsFailure::NoTls),
    ("unexpected eof while handshaking", TlsFailure::NoTls),
    // The server's certificate (rustls's `invalid peer certificate: …`).
    ("notvalidforname", TlsFailure::WrongName),
    ("certificate not valid for name", TlsFailure::WrongName),
    ("certificate expired", TlsFailure::Expired),
    ("certificate not valid yet", TlsFailure::Expired),
    ("invalid peer certificate: expired", TlsFailure::Expired),
    ("invalid peer certificate: notvalidyet", TlsFailure::Expired),
    ("invalidcertificate(expired", TlsFailure::Expired),
    ("invalidcertificate(notvalidyet", TlsFailure::Expired),
    ("unknownissuer", TlsFailure::Untrusted),
    ("badsignature", TlsFailure::Untrusted),
    ("invalid peer certificate", TlsFailure::Untrusted),
    ("invalidcertificate(", TlsFailure::Untrusted),
    ("certificate verify failed", TlsFailure::Untrusted),
    // An alert from the server about our certificate (TLS 1.3 sends it after the client thinks
    // the handshake is done, at the first read).
    (
        "received fatal alert: certificaterequired",
        TlsFailure::ClientCertificateRefused,
    ),
    ("received fatal alert: unknownca", TlsFailure::ClientCertificateRefused),
    (
        "received fatal alert: badcertificate",
        TlsFailure::ClientCertificateRefused,
    ),
    (
        "received fatal alert: certificateunknown",
        TlsFailure::ClientCertificateRefused,
    ),
    (
        "received fatal alert: unsupportedcertificate",
        TlsFailure::ClientCertificateRefused,
    ),
    (
        "received fatal alert: certificateexpired",
        TlsFailure::ClientCertificateRefused,
    ),
    (
        "received fatal alert: certificaterevoked",
        TlsFailure::ClientCertificateRefused,
    ),
    (
        "alertreceived(certificaterequired",
        TlsFailure::ClientCertificateRefused,
    ),
    ("alertreceived(unknownca", TlsFailure::ClientCertificateRefused),
    ("alertreceived(badcertificate", TlsFailure::ClientCertificateRefused),
    ("alertreceived(certificateunknown", TlsFailure::ClientCertificateRefused),
];

/// The TLS failure `text` describes, if it describes one that cannot heal.
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith;
/// use locksmith::driver::permanent::{tls_failure_in, TlsFailure};
/// assert_eq!(tls_failure_in("invalid peer certificate: UnknownIssuer"), Some(TlsFailure::Untrusted));
/// assert_eq!(tls_failure_in("connection refused"), None);
/// ```
pub fn tls_failure_in(text: &str) -> Option<TlsFailure> {
    let text = text.to_ascii_lowercase();
    PATTERNS
        .iter()
        .find(|(pattern, _)| text.contains(pattern))
        .map(|&(_, failure)| failure)
}

/// The TLS failure `err` or one of its causes (its `source()` chain) is, looked for in their
/// messages and debug forms (a client library may keep rustls's error only in the latter).
pub fn tls_failure(err: &(dyn Error + 'static)) -> Option<TlsFailure> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(failure) = tls_failure_in(&e.to_string()).or_else(|| tls_failure_in(&format!("{e:?}"))) {
            return Some(failure);
        }
        next = e.source();
    }
    None
}

impl TlsFailure {
    /// What is wrong and what fixes it, for the server at `server` (`None`: a message that names
    /// the server already).
    pub fn explain(self, server: Option<&str>) -> String {
        let server = match server {
            Some(at) => format!("server at {at}"),
            None => "server".to_owned(),
        };
        match self {
            TlsFailure::NoTls => format!(
                "the {server} does not speak TLS: use a plain URL (redis://, etcd://, zk://; \
                 sslmode=disable on postgres://) or enable TLS on the server"
            ),
            TlsFailure::Untrusted => format!(
                "the certificate of the {server} is not trusted by ca= (or the system's roots \
                 without it): give ca= the certificate of the CA that signed it"
            ),
            TlsFailure::WrongName => format!(
                "the certificate of the {server} is not issued for that name: connect by a name \
                 it lists, or set server_name="
            ),
            TlsFailure::Expired => format!(
                "the certificate of the {server} has expired or is not valid yet: renew it (or \
                 check this machine's clock)"
            ),
            TlsFailure::ClientCertificateRefused => format!(
                "the {server} refused our client certificate: give cert= and key= of a \
                 certificate its CA signed"
            ),
        }
    }

    /// The permanent error: `what` was being done, the explanation, and the client's own words
    /// (`detail`, its first line).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// use locksmith::{driver::permanent::TlsFailure, LockError};
    /// let e = TlsFailure::Expired.denied("connecting to etcd", Some("h:2379"), "certificate expired\nmore");
    /// assert!(matches!(&e, LockError::Denied(text) if text.contains("has expired") && !text.contains("more")));
    /// ```
    pub fn denied(self, what: &str, server: Option<&str>, detail: &str) -> LockError {
        let detail = detail.lines().next().unwrap_or_default();
        LockError::Denied(format!("{what}: TLS failed: {} ({detail})", self.explain(server)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_what_clients_say() {
        for (text, expected) in [
            (
                "error performing TLS handshake: server does not support TLS",
                TlsFailure::NoTls,
            ),
            ("received corrupt message of type InvalidContentType", TlsFailure::NoTls),
            ("Unavailable: tls handshake eof", TlsFailure::NoTls),
            ("invalid peer certificate: UnknownIssuer", TlsFailure::Untrusted),
            ("invalid peer certificate: BadSignature", TlsFailure::Untrusted),
            (
                "invalid peer certificate: certificate not valid for name \"x\"; certificate is only valid for y",
                TlsFailure::WrongName,
            ),
            (
                "invalid peer certificate: certificate expired: verification time 2 (UNIX), but ...",
                TlsFailure::Expired,
            ),
            ("InvalidCertificate(Expired)", TlsFailure::Expired),
            (
                "received fatal alert: CertificateRequired",
                TlsFailure::ClientCertificateRefused,
            ),
            ("received fatal alert: UnknownCA", TlsFailure::ClientCertificateRefused),
        ] {
            assert_eq!(tls_failure_in(text), Some(expected), "{text}");
        }
    }

    #[test]
    fn what_can_heal_is_not_recognised() {
        for text in [
            "Connection refused (os error 111)",
            "Connection reset by peer (os error 104)",
            "timed out",
            "LOADING Redis is loading the dataset in memory",
            "the database system is starting up",
            "session expired",
            "requested lease not found",
            "etcdserver: leader changed",
            "broken pipe",
        ] {
            assert_eq!(tls_failure_in(text), None, "{text}");
        }
    }

    #[test]
    fn looks_down_the_source_chain() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("connecting failed")
            }
        }
        impl Error for Outer {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("invalid peer certificate: UnknownIssuer"));
        assert_eq!(tls_failure(&e), Some(TlsFailure::Untrusted));
        let e = Outer(std::io::Error::other("connection reset"));
        assert_eq!(tls_failure(&e), None);
        let denied = TlsFailure::NoTls.denied("connecting", Some("127.0.0.1:6379"), "corrupt\nmore");
        let LockError::Denied(text) = denied else { panic!() };
        assert!(
            text.contains("server at 127.0.0.1:6379 does not speak TLS") && !text.contains("more"),
            "{text}"
        );
    }
}
