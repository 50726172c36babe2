//! The `zk://` URL: hosts, namespace path and options, validated once at connect time.
//!
//! ```text
//! zk://[user:password@]host1[:port],host2[:port],.../[namespace]?session_timeout=10s&connect_timeout=5s
//! ```

use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::Result;

/// ZooKeeper's client port when the URL gives none.
pub const DEFAULT_PORT: u16 = 2181;

/// The session timeout asked for when the URL sets none: 10 s.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`crate::connect`] tries to establish a session when the URL sets no `connect_timeout`:
/// 5 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest one call (other than a waiting acquire) may take when the URL sets no
/// `request_timeout`: 5 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The namespace (parent of every lock node) when the URL has no path.
pub const DEFAULT_NAMESPACE: &str = "/locksmith";

/// The query options `zk://` and `zks://` understand. `ttl` is an alias of `session_timeout`;
/// `admin` names a second `digest` identity (`user:base64(sha1(user:password))`, as ZooKeeper's
/// `setAcl digest:...` takes it) that may also change the nodes; the last five are the TLS and
/// secret options every backend shares.
pub const OPTIONS: &[&str] = &[
    "session_timeout",
    "ttl",
    "connect_timeout",
    "request_timeout",
    "admin",
    "ca",
    "cert",
    "key",
    "server_name",
    "password_file",
];

/// The largest session timeout accepted in a URL (ZooKeeper's own maximum is far lower by default).
const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// The largest connect timeout accepted in a URL.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Everything the backend needs from the URL. (No `Debug`: it holds the password.)
#[derive(Clone)]
pub(crate) struct ZkConfig {
    /// `host1:port1,host2:port2`, as the ZooKeeper client takes it.
    pub(crate) connect_string: String,
    /// The absolute namespace path, without a trailing slash: `/locksmith`, `/apps/billing`.
    pub(crate) namespace: String,
    /// The session timeout requested from the server (which clamps it).
    pub(crate) session_timeout: Duration,
    /// How long to try establishing a session before giving up with `Unavailable`.
    pub(crate) connect_timeout: Duration,
    /// The longest one call other than a waiting acquire may take.
    pub(crate) request_timeout: Duration,
    /// `user:password` for ZooKeeper's `digest` authentication scheme, if the URL has credentials.
    pub(crate) digest_auth: Option<Vec<u8>>,
    /// A second `digest` identity (`user:hash`) given all permissions on the nodes.
    pub(crate) admin: Option<String>,
    /// TLS (`zks://`), with its files read.
    pub(crate) tls: Option<locksmith_core::driver::url::TlsFiles>,
}

impl ZkConfig {
    /// Reads and validates a `zk://` URL; every problem is [`locksmith_core::LockError::InvalidUrl`].
    pub(crate) fn from_url(url: &BackendUrl) -> Result<Self> {
        let tls = match url.scheme.as_str() {
            "zk" => false,
            "zks" => true,
            other => return Err(url.error(format!("expected the zk:// or zks:// scheme, not {other}://"))),
        };
        url.expect_only_options(OPTIONS)?;
        let hosts = url.expect_hosts()?;
        let connect_string = hosts
            .iter()
            .map(|h| h.to_addr(DEFAULT_PORT))
            .collect::<Vec<_>>()
            .join(",");

        let session_timeout = match (url.duration_option("session_timeout")?, url.duration_option("ttl")?) {
            (Some(_), Some(_)) => return Err(url.error("give session_timeout or its alias ttl, not both")),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => DEFAULT_SESSION_TIMEOUT,
        };
        if session_timeout < Duration::from_millis(1) || session_timeout > MAX_SESSION_TIMEOUT {
            return Err(url.error(format!(
                "session_timeout {session_timeout:?} is outside 1ms..={MAX_SESSION_TIMEOUT:?} (the server clamps it further)"
            )));
        }
        let connect_timeout = url
            .duration_option("connect_timeout")?
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        if connect_timeout.is_zero() || connect_timeout > MAX_CONNECT_TIMEOUT {
            return Err(url.error(format!(
                "connect_timeout {connect_timeout:?} is outside 1ms..={MAX_CONNECT_TIMEOUT:?}"
            )));
        }

        let request_timeout = url
            .duration_option("request_timeout")?
            .unwrap_or(DEFAULT_REQUEST_TIMEOUT);
        if request_timeout.is_zero() || request_timeout > MAX_CONNECT_TIMEOUT {
            return Err(url.error(format!(
                "request_timeout {request_timeout:?} is outside 1ms..={MAX_CONNECT_TIMEOUT:?}"
            )));
        }

        let namespace = namespace(&url.path).map_err(|reason| url.error(reason))?;
        let digest_auth = match (url.user(), url.query.contains_key("password_file")) {
            (Some(user), _) => {
                let password = url.password()?.unwrap_or_default();
                Some(format!("{user}:{password}").into_bytes())
            }
            (None, true) => return Err(url.error("password_file needs a user: zk://user@host?password_file=...")),
            (None, false) => None,
        };
        let admin = url.query.get("admin").cloned();
        if admin.as_ref().is_some_and(|a| !a.contains(':')) {
            return Err(url.error("admin=user:hash (the digest id of ZooKeeper's setAcl digest:user:hash:cdrwa)"));
        }
        if admin.is_some() && digest_auth.is_none() {
            return Err(url.error(
                "admin needs credentials of our own (zk://user:password@...): without them every node is open",
            ));
        }
        let tls_files = url.tls_files()?;
        if !tls && (tls_files.ca.is_some() || tls_files.identity.is_some() || tls_files.server_name.is_some()) {
            return Err(url.error("ca, cert, key and server_name are TLS options: use zks://"));
        }
        if tls && tls_files.ca.is_none() {
            return Err(url.error("zks:// needs ca= (the ZooKeeper client has no system roots to fall back on)"));
        }
        if tls_files.server_name.is_some() {
            return Err(url.error("server_name is not supported on zks:// (the client verifies the host of the URL)"));
        }
        if tls && !cfg!(feature = "tls") {
            return Err(url.error("zks:// needs the `tls` feature of locksmith (or of locksmith-zk)"));
        }
        Ok(ZkConfig {
            connect_string,
            namespace,
            session_timeout,
            connect_timeout,
            request_timeout,
            digest_auth,
            admin,
            tls: tls.then_some(tls_files),
        })
    }
}

/// The absolute namespace path for the URL path (already percent-decoded, without its leading
/// `/`): [`DEFAULT_NAMESPACE`] when empty; otherwise every segment must be a valid ZooKeeper node
/// name.
fn namespace(path: &str) -> std::result::Result<String, String> {
    if path.is_empty() {
        return Ok(DEFAULT_NAMESPACE.to_owned());
    }
    let mut out = String::with_capacity(path.len() + 1);
    for (i, segment) in path.split('/').enumerate() {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(format!("the namespace path {path:?} has an empty, `.` or `..` segment"));
        }
        if i == 0 && segment == "zookeeper" {
            return Err("the namespace may not be under /zookeeper, which the server reserves".into());
        }
        if let Some(c) = segment.chars().find(|&c| !valid_path_char(c)) {
            return Err(format!(
                "the namespace path {path:?} contains {c:?}, which ZooKeeper does not allow"
            ));
        }
        out.push('/');
        out.push_str(segment);
    }
    Ok(out)
}

/// The characters ZooKeeper accepts in a node name (see `PathUtils.validatePath`; surrogates cannot
/// occur in a Rust string).
fn valid_path_char(c: char) -> bool {
    !matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(url: &str) -> Result<ZkConfig> {
        ZkConfig::from_url(&BackendUrl::parse(url)?)
    }

    #[test]
    fn defaults_and_hosts() {
        let c = cfg("zk://h1,h2:2182,[::1]:3").unwrap();
        assert_eq!(c.connect_string, "h1:2181,h2:2182,[::1]:3");
        assert_eq!(c.namespace, DEFAULT_NAMESPACE);
        assert_eq!(c.session_timeout, DEFAULT_SESSION_TIMEOUT);
        assert_eq!(c.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(c.request_timeout, DEFAULT_REQUEST_TIMEOUT);
        assert!(c.digest_auth.is_none());
    }

    #[test]
    fn options_namespace_and_credentials() {
        let c = cfg("zk://u:p@h/apps/billing?session_timeout=2s&connect_timeout=500ms").unwrap();
        assert_eq!(c.namespace, "/apps/billing");
        assert_eq!(c.session_timeout, Duration::from_secs(2));
        assert_eq!(c.connect_timeout, Duration::from_millis(500));
        assert_eq!(c.digest_auth.as_deref(), Some(&b"u:p"[..]));
        assert_eq!(cfg("zk://h?ttl=3s").unwrap().session_timeout, Duration::from_secs(3));
    }

    #[test]
    fn rejects_bad_options() {
        for bad in [
            "zk://",
            "zk://h?sessiontimeout=1s",
            "zk://h?session_timeout=fast",
            "zk://h?session_timeout=0",
            "zk://h?session_timeout=1s&ttl=2s",
            "zk://h?connect_timeout=0ms",
            "zk://h?request_timeout=0",
            "zk://h/zookeeper/x",
            "zk://h/a//b",
            "zk://h/a/../b",
            "zk://h/a%01b",
        ] {
            assert!(
                matches!(cfg(bad), Err(locksmith_core::LockError::InvalidUrl { .. })),
                "{bad}"
            );
        }
    }
}
