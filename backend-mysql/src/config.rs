//! The `mysql://` (or `mariadb://`) URL, parsed once with `locksmith_core::driver::url`: the
//! servers, the user and password, the database (the URL's path), and the options this backend
//! knows ([`OPTIONS`]).
//!
//! One host (`mysql://user:pw@db:3306/locks`: a server, or a proxy or virtual IP in front of
//! several), or several (`mysql://user:pw@db1:3306,db2:3306/locks`: a primary and its replicas,
//! tried in that order; each connection goes to the first that answers and takes writes,
//! `conn/dial.rs`). `replication=sync|async` says whether the primary must have
//! semi-synchronous replication on ([`Replication`]): `sync` is the default with several hosts.

use std::fmt;
use std::time::Duration;

use locksmith_core::driver::url::TlsFiles;
use locksmith_core::driver::{BackendUrl, DEFAULT_REQUEST_TIMEOUT};
use locksmith_core::{LockError, Result};

/// The URL options of `mysql://` and `mariadb://`.
pub const OPTIONS: &[&str] = &[
    "ttl",
    "request_timeout",
    "connect_timeout",
    "heartbeat",
    "password_file",
    "ssl_mode",
    "ca",
    "cert",
    "key",
    "layout",
    "procedures",
    "replication",
];

const DEFAULT_PORT: u16 = 3306;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a locker renews its waiters' entries and sweeps expired entries.
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);

/// Whether (and how) the connection is encrypted: `ssl_mode=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// No TLS (the default).
    Disabled,
    /// TLS, the server's certificate checked against `ca=` or the system's roots.
    VerifyCa,
    /// TLS, the certificate checked and its name matched with the host.
    VerifyIdentity,
}

/// Where a lock lives: `layout=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// The tables alone (the default).
    Default,
    /// `layout=get_lock`: the tables, and a holder also holds the server's named lock of its
    /// name (`GET_LOCK`), so that programs calling `GET_LOCK('name', t)` share the lock
    /// (`crate::getlock`). Mutexes only.
    GetLock,
}

/// What the primary must promise about its commits before a connection to it is used
/// (`replication=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Replication {
    /// `replication=sync` (the default when the URL names several hosts): the primary must have
    /// semi-synchronous replication on and working (`rpl_semi_sync_master_enabled`, or MySQL's
    /// `rpl_semi_sync_source_enabled`, and its status `ON`), so that every commit is on a replica
    /// before it is answered and a failover to that replica keeps every grant.
    Sync,
    /// `replication=async` (the default with one host): no such check; the commits wait for what
    /// the server's own settings say. With a primary that does not wait for its replicas, a
    /// failover may lose grants and renewals, and hand a lock out twice (with a larger token, so
    /// fenced stores stay safe).
    Async,
}

/// A parsed URL.
#[derive(Clone)]
pub(crate) struct Config {
    /// The servers' hosts and ports, in the order they are tried: one server, or a primary and
    /// its replicas (the one that takes writes is used).
    pub hosts: Vec<(String, u16)>,
    /// `replication=`: [`Replication::Sync`] by default with several hosts.
    pub replication: Replication,
    pub user: String,
    pub password: Option<String>,
    pub database: String,
    pub ttl: Option<Duration>,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    pub heartbeat: Duration,
    pub ssl_mode: SslMode,
    pub ca: Option<String>,
    /// The client certificate and its key (`cert=`, `key=`), for servers that ask for one.
    pub client: Option<(String, String)>,
    /// `ca=`, `cert=` and `key=` read, for the probe of a refused client certificate
    /// (`cert_check.rs`); `None` without TLS.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub tls_files: Option<TlsFiles>,
    pub layout: Layout,
    /// `procedures=off`: no stored procedures, every step a transaction of several statements
    /// (`conn/routines.rs`).
    pub procedures: bool,
    pub url: String,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("hosts", &self.hosts)
            .field("replication", &self.replication)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("database", &self.database)
            .field("ssl_mode", &self.ssl_mode)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Parses `url`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidUrl`] for a URL without a host, user or database, an unknown option or
    /// a bad value.
    pub fn parse(url: &BackendUrl) -> Result<Config> {
        if !matches!(url.scheme.as_str(), "mysql" | "mariadb") {
            return Err(url.error(format!("not a mysql:// URL (scheme {:?})", url.scheme)));
        }
        url.expect_only_options(OPTIONS)?;
        let hosts: Vec<(String, u16)> = url
            .expect_hosts()?
            .iter()
            .map(|h| (h.host.clone(), h.port.unwrap_or(DEFAULT_PORT)))
            .collect();
        let replication = match url.query.get("replication").map(String::as_str) {
            None if hosts.len() > 1 => Replication::Sync,
            None => Replication::Async,
            Some("sync") => Replication::Sync,
            Some("async") => Replication::Async,
            Some(other) => {
                return Err(url.error(format!(
                    "replication={other}: expected sync (a failover keeps every grant: the primary must have \
                     semi-synchronous replication on) or async (a failover may hand a lock out twice)"
                )))
            }
        };
        let user = url
            .user()
            .ok_or_else(|| url.error("mysql:// needs a user: mysql://user:password@host/database"))?
            .to_owned();
        let database = url.path.trim_matches('/').to_owned();
        if database.is_empty() {
            return Err(url.error("mysql:// needs a database: mysql://user:password@host/database"));
        }
        if database.len() > 64 || database.contains(['/', '\\', '.', '\0', '`']) {
            return Err(url.error(format!(
                "{database:?} is no database name MySQL accepts (at most 64 characters, no / \\ . ` or NUL)"
            )));
        }
        let ssl_mode = match url.query.get("ssl_mode").map(String::as_str) {
            None | Some("disabled") => SslMode::Disabled,
            Some("verify_ca") | Some("required") => SslMode::VerifyCa,
            Some("verify_identity") => SslMode::VerifyIdentity,
            Some(other) => {
                return Err(url.error(format!(
                    "ssl_mode={other:?}: expected disabled, required, verify_ca or verify_identity"
                )))
            }
        };
        if ssl_mode != SslMode::Disabled && !cfg!(feature = "tls") {
            return Err(LockError::InvalidOption(
                "ssl_mode= needs locksmith's `tls` feature (locksmith-mysql/tls)".into(),
            ));
        }
        let client = match (url.query.get("cert"), url.query.get("key")) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            _ => return Err(url.error("cert= and key= go together")),
        };
        if ssl_mode == SslMode::Disabled && (client.is_some() || url.query.contains_key("ca")) {
            return Err(url.error("ca=, cert= and key= need ssl_mode=verify_ca or verify_identity"));
        }
        for (option, path) in url
            .query
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "ca" | "cert" | "key"))
        {
            if let Err(e) = std::fs::metadata(path) {
                return Err(url.error(format!("{option}={path:?} cannot be read: {e}")));
            }
        }
        let layout = match url.query.get("layout").map(String::as_str) {
            None | Some("default") => Layout::Default,
            Some("get_lock") => Layout::GetLock,
            Some(other) => {
                return Err(url.error(format!(
                    "layout={other:?}: expected default or get_lock (locks shared with GET_LOCK)"
                )))
            }
        };
        let heartbeat = url.positive_duration_option("heartbeat", DEFAULT_HEARTBEAT)?;
        if heartbeat < Duration::from_millis(100) || heartbeat > Duration::from_secs(60) {
            return Err(url.error(format!("heartbeat={heartbeat:?}: expected 100ms to 60s")));
        }
        let procedures = match url.query.get("procedures").map(String::as_str) {
            None | Some("on") => true,
            Some("off") => false,
            Some(other) => return Err(url.error(format!("procedures={other:?}: expected on or off"))),
        };
        Ok(Config {
            hosts,
            replication,
            user,
            password: url.password()?,
            database,
            ttl: url.lock_ttl_option()?,
            request_timeout: url.positive_duration_option("request_timeout", DEFAULT_REQUEST_TIMEOUT)?,
            connect_timeout: url.positive_duration_option("connect_timeout", DEFAULT_CONNECT_TIMEOUT)?,
            heartbeat,
            ssl_mode,
            ca: url.query.get("ca").cloned(),
            client,
            tls_files: (ssl_mode != SslMode::Disabled).then(|| url.tls_files()).transpose()?,
            layout,
            procedures,
            url: url.redacted(),
        })
    }

    /// How long a waiter's entry lives without its locker's heartbeat: five beats.
    pub fn waiter_life(&self) -> Duration {
        self.heartbeat * 5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Config> {
        Config::parse(&BackendUrl::parse(url)?)
    }

    #[test]
    fn reads_the_server_user_and_database() {
        let c = parse("mysql://app:pw@db:3307/locks?ttl=5s").unwrap();
        assert_eq!(c.hosts, [("db".to_owned(), 3307)]);
        assert_eq!(c.user, "app");
        assert_eq!((c.password.as_deref(), c.database.as_str()), (Some("pw"), "locks"));
        assert_eq!(c.ttl, Some(Duration::from_secs(5)));
        assert_eq!(parse("mariadb://app@db/locks").unwrap().hosts[0].1, 3306);
        assert_eq!(c.replication, Replication::Async, "one server: no replica asked for");
        assert_eq!(parse("mysql://app@db/locks").unwrap().layout, Layout::Default);
        assert_eq!(
            parse("mysql://app@db/locks?layout=get_lock").unwrap().layout,
            Layout::GetLock
        );
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        for bad in [
            "mysql://app@db",
            "mysql://db/locks",
            "mysql://app@a,b/locks?replication=maybe",
            "mysql://app@db/locks?replication=",
            "mysql://app@db/locks?replication=SYNC",
            "mysql://app@db/locks?nope=1",
            "mysql://app@db/a.b",
            "mysql://app@db/locks?heartbeat=1ms",
            "mysql://app@db/locks?ssl_mode=maybe",
            "mysql://app@db/locks?layout=advisory",
            "mysql://app@db/locks?procedures=maybe",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn several_hosts_are_a_primary_and_its_semi_synchronous_replicas() {
        let c = parse("mysql://app:pw@db1:3307,db2,[::1]:3308/locks").unwrap();
        assert_eq!(
            c.hosts,
            [
                ("db1".to_owned(), 3307),
                ("db2".to_owned(), 3306),
                ("::1".to_owned(), 3308)
            ]
        );
        // A failover must keep every grant, unless the URL says otherwise.
        assert_eq!(c.replication, Replication::Sync);
        assert_eq!(
            parse("mysql://app@db1,db2/locks?replication=async")
                .unwrap()
                .replication,
            Replication::Async
        );
        assert_eq!(
            parse("mariadb://app@vip/locks?replication=sync").unwrap().replication,
            Replication::Sync
        );
        assert_eq!(
            parse("mysql://app@vip/locks?replication=async").unwrap().replication,
            Replication::Async
        );
        assert!(!format!("{c:?}").contains("pw"));
    }
}
