//! The `etcd://` / `etcds://` URL: endpoints, namespace, key layout, session TTL, timeouts, TLS
//! and credentials.

use std::time::Duration;

use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::Result;

use crate::layout::Layout;

/// The etcd client port used when a host in the URL has none.
pub const DEFAULT_PORT: u16 = 2379;

/// The session TTL used when the URL has no `ttl=` option: 10 s.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(10);

/// How long [`crate::connect`] waits for the first answer of the cluster (`connect_timeout=`):
/// 3 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one request may take before it fails as unavailable (`request_timeout=`): 5 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The namespace of the default layout when the URL has no path.
pub const DEFAULT_NAMESPACE: &str = "locksmith";

/// The query options an `etcd://` or `etcds://` URL accepts (the last five are the TLS and secret
/// options every backend shares).
pub const OPTIONS: &[&str] = &[
    "ttl",
    "connect_timeout",
    "request_timeout",
    "layout",
    "ca",
    "cert",
    "key",
    "server_name",
    "password_file",
];

/// Everything [`crate::connect`] reads from the URL. Its `Debug` output hides the password.
#[derive(Clone)]
pub struct Config {
    /// `http://host:port` (`https://` for `etcds://`) of every endpoint, in URL order.
    pub endpoints: Vec<String>,
    /// `user` and `password` for etcd authentication: the URL's user, and the password from the
    /// URL, `password_file=` or `LOCKSMITH_PASSWORD`.
    pub credentials: Option<(String, String)>,
    /// TLS (`etcds://`), with its files read.
    pub tls: Option<locksmith_core::driver::url::TlsFiles>,
    /// How keys are laid out.
    pub layout: Layout,
    /// The session TTL requested from the server, already rounded up to whole seconds.
    pub session_ttl: Duration,
    /// Bound for connecting and for the first lease grant.
    pub connect_timeout: Duration,
    /// Bound for every later request.
    pub request_timeout: Duration,
}

impl Config {
    /// Reads the configuration from `url`, rejecting unknown or malformed options with
    /// [`locksmith_core::LockError::InvalidUrl`].
    pub fn from_url(url: &BackendUrl) -> Result<Self> {
        let tls = match url.scheme.as_str() {
            "etcd" => false,
            "etcds" => true,
            other => return Err(url.error(format!("expected the etcd:// or etcds:// scheme, not {other}://"))),
        };
        url.expect_only_options(OPTIONS)?;
        let hosts = url.expect_hosts()?;
        let http = if tls { "https" } else { "http" };
        let endpoints = hosts
            .iter()
            .map(|h| format!("{http}://{}", h.to_addr(DEFAULT_PORT)))
            .collect();
        let credentials = match (url.user(), url.query.contains_key("password_file")) {
            (Some(user), _) => match url.password()? {
                Some(password) => Some((user.to_owned(), password)),
                None => return Err(url.error(
                    "etcd credentials need a password: etcd://user:password@host, password_file= or LOCKSMITH_PASSWORD",
                )),
            },
            (None, true) => return Err(url.error("password_file needs a user: etcd://user@host?password_file=...")),
            (None, false) => None,
        };
        let tls_files = url.tls_files()?;
        if !tls && (tls_files.ca.is_some() || tls_files.identity.is_some() || tls_files.server_name.is_some()) {
            return Err(url.error("ca, cert, key and server_name are TLS options: use etcds://"));
        }
        if tls && !cfg!(feature = "tls") {
            return Err(url.error("etcds:// needs the `tls` feature of locksmith (or of locksmith-etcd)"));
        }
        let session_ttl = url.duration_option("ttl")?.unwrap_or(DEFAULT_SESSION_TTL);
        if session_ttl.is_zero() || session_ttl > locksmith_core::MAX_TTL {
            return Err(url.error(format!(
                "ttl={session_ttl:?} is outside the allowed range (more than zero, at most {:?})",
                locksmith_core::MAX_TTL
            )));
        }
        let connect_timeout = url.positive_duration_option("connect_timeout", DEFAULT_CONNECT_TIMEOUT)?;
        let request_timeout = url.positive_duration_option("request_timeout", DEFAULT_REQUEST_TIMEOUT)?;
        let layout = match url.query.get("layout").map(String::as_str) {
            None | Some("default") => {
                let namespace = if url.path.is_empty() {
                    DEFAULT_NAMESPACE
                } else {
                    url.path.as_str()
                };
                let namespace = LockName::new(namespace)
                    .map_err(|e| url.error(format!("the namespace (URL path) is not usable: {e}")))?;
                Layout::Default {
                    namespace: namespace.encoded().to_owned(),
                }
            }
            Some("go-mutex") => {
                let prefix = if url.path.is_empty() {
                    String::new()
                } else {
                    format!("{}/", url.path)
                };
                Layout::GoMutex { prefix }
            }
            Some(other) => {
                return Err(url.error(format!(
                    "layout={other:?} is unknown (expected `default` or `go-mutex`)"
                )))
            }
        };
        Ok(Config {
            endpoints,
            credentials,
            tls: tls.then_some(tls_files),
            layout,
            session_ttl: round_up_to_seconds(session_ttl),
            connect_timeout,
            request_timeout,
        })
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("endpoints", &self.endpoints)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("tls", &self.tls)
            .field("layout", &self.layout)
            .field("session_ttl", &self.session_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// etcd lease TTLs are whole seconds: 300 ms becomes 1 s, 1.5 s becomes 2 s.
pub fn round_up_to_seconds(d: Duration) -> Duration {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Duration::from_secs(secs.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Config> {
        Config::from_url(&BackendUrl::parse(url)?)
    }

    #[test]
    fn defaults_and_options() {
        let c = parse("etcd://h1,h2:1234").unwrap();
        assert_eq!(c.endpoints, ["http://h1:2379", "http://h2:1234"]);
        assert_eq!(c.session_ttl, DEFAULT_SESSION_TTL);
        assert_eq!(c.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert!(matches!(&c.layout, Layout::Default { namespace } if namespace == "locksmith"));
        let c = parse("etcd://h/team/a?ttl=300ms&connect_timeout=500ms&request_timeout=2s&layout=go-mutex").unwrap();
        assert_eq!(c.session_ttl, Duration::from_secs(1));
        assert_eq!(c.connect_timeout, Duration::from_millis(500));
        assert_eq!(c.request_timeout, Duration::from_secs(2));
        assert!(matches!(&c.layout, Layout::GoMutex { prefix } if prefix == "team/a/"));
        let c = parse("etcd://h/team/a").unwrap();
        assert!(matches!(&c.layout, Layout::Default { namespace } if namespace == "team%2Fa"));
        let c = parse("etcd://u:p@h").unwrap();
        assert_eq!(c.credentials, Some(("u".into(), "p".into())));
    }

    #[test]
    fn rejects_bad_options() {
        for bad in [
            "etcd://",
            "etcd://h?ttl=0",
            "etcd://h?ttl=abc",
            "etcd://h?ttl=100h",
            "etcd://h?layout=zk",
            "etcd://h?connect_timeout=0",
            "etcd://h?ttl=1s&bogus=1",
            "etcd://u@h",
            "redis://h",
        ] {
            assert!(
                matches!(parse(bad), Err(locksmith_core::LockError::InvalidUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn rounds_ttls_up() {
        assert_eq!(round_up_to_seconds(Duration::from_millis(1)), Duration::from_secs(1));
        assert_eq!(round_up_to_seconds(Duration::from_millis(1500)), Duration::from_secs(2));
        assert_eq!(round_up_to_seconds(Duration::from_secs(3)), Duration::from_secs(3));
    }
}
