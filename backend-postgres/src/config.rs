//! The URL: `postgres://user:password@host:port/db?ttl=…&request_timeout=…&connect_timeout=…&schema=…`,
//! or several hosts (`host1:5432,host2:5432`: a primary and its standbys, the primary found by
//! asking each in turn); TLS: `sslmode=disable|require|verify-full`, `ca=`, `cert=`, `key=`,
//! `server_name=` (and libpq's `sslrootcert=`, `sslcert=`, `sslkey=`); the layout:
//! `layout=default|advisory`; `replication=sync|async`; `listen=host:port` (the server that the
//! LISTEN connection goes to when the URL's is a transaction pooler); and the libpq options that
//! hosting providers' `DATABASE_URL`s carry: `application_name=`, `options=`,
//! `target_session_attrs=`.

use std::fmt;
use std::time::Duration;

use locksmith_core::driver::{BackendUrl, DEFAULT_REQUEST_TIMEOUT};
use locksmith_core::Result;

use crate::layout::Layout;

/// The URL options this backend accepts.
pub const OPTIONS: &[&str] = &[
    "ttl",
    "request_timeout",
    "connect_timeout",
    "schema",
    "password_file",
    "sslmode",
    "ca",
    "cert",
    "key",
    "server_name",
    "layout",
    "replication",
    "listen",
    "application_name",
    "options",
    "target_session_attrs",
    "sslrootcert",
    "sslcert",
    "sslkey",
];

/// libpq's names of the TLS files, and locksmith's own: a `DATABASE_URL` made for libpq works as
/// it is.
const LIBPQ_TLS_NAMES: [(&str, &str); 3] = [("sslrootcert", "ca"), ("sslcert", "cert"), ("sslkey", "key")];

/// What connects a socket with TLS when `sslmode=` asks for it: rustls with the `tls` feature,
/// nothing without it (the URL parser then refuses every mode but `disable`).
#[cfg(feature = "tls")]
pub(crate) type Connector = crate::tls::Tls;
/// See above.
#[cfg(not(feature = "tls"))]
pub(crate) type Connector = tokio_postgres::NoTls;

/// The default server port.
const DEFAULT_PORT: u16 = 5432;
/// The default schema of the tables.
const DEFAULT_SCHEMA: &str = "locksmith";
/// The default `connect_timeout`.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection is idle before TCP keepalive probes start (`conn::dial`): a peer gone in
/// silence (a host that died, a flow a NAT dropped) ends an idle connection in about a minute (30 s
/// idle, then 3 probes 10 s apart) instead of the kernel's two hours, and the probes keep a NAT's
/// idle timeout from dropping the flow.
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// The pause between two TCP keepalive probes.
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How many TCP keepalive probes go unanswered before the connection is dropped.
pub(crate) const KEEPALIVE_RETRIES: u32 = 3;

/// What locksmith's commits wait for before they are answered (`replication=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Replication {
    /// `replication=sync` (the default when the URL names several hosts): the primary must have a
    /// synchronous standby, and every commit waits until one has it (`synchronous_commit = on`).
    Sync,
    /// One host and no `replication=`: every commit waits for the standbys the server names as
    /// synchronous, if any (`synchronous_commit = on`); none is required.
    AsConfigured,
    /// `replication=async`: a commit waits for the primary's own disk only (`synchronous_commit =
    /// local`), whatever standbys the server names: a failover may lose grants and renewals, and
    /// hand a lock out twice (with a larger token, so fenced stores stay safe).
    Async,
}

/// A parsed `postgres://` URL. Its `Debug` never shows the password.
#[derive(Clone)]
pub(crate) struct Config {
    /// The servers' hosts and ports, in the order they are tried: one server, or a primary and
    /// its standbys (the one that accepts writes is used).
    pub hosts: Vec<(String, u16)>,
    /// What a commit waits for: `replication=sync` (the default when the URL names more than one
    /// host), `replication=async`, or neither said with one host.
    pub replication: Replication,
    /// The user (default `postgres`).
    pub user: String,
    /// The password: the URL's, `password_file=`, or `LOCKSMITH_PASSWORD`.
    pub password: Option<String>,
    /// The database (default: the user's name, as libpq does).
    pub db: String,
    /// The TTL of locks whose builder sets none (`ttl=`).
    pub ttl: Option<Duration>,
    /// The longest one call may take (`request_timeout=`, default 5 s).
    pub request_timeout: Duration,
    /// The longest a connection may take to open (`connect_timeout=`, default 5 s); with several
    /// hosts, each gets its share to answer the connection attempt.
    pub connect_timeout: Duration,
    /// The schema of the tables (`schema=`, default `locksmith`).
    pub schema: String,
    /// Whether connections use TLS (`sslmode=require` or `verify-full`: both verify the server).
    pub tls: bool,
    /// What makes the TLS connections.
    pub connector: Connector,
    /// `layout=default` (the tables alone) or `advisory` (shared with `pg_advisory_lock`).
    pub layout: Layout,
    /// `listen=`: the servers of the LISTEN connection, when the URL's servers are a transaction
    /// pooler (which cannot carry it). `None`: the URL's servers.
    pub listen: Option<Vec<(String, u16)>>,
    /// `application_name=` (default `locksmith`): what `pg_stat_activity` shows.
    pub application_name: String,
    /// `options=`: the session's startup options (`-c name=value …`), as libpq sends them.
    pub options: Option<String>,
    /// The URL as given, its password replaced by `***`: for errors found after parsing.
    pub url: String,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("hosts", &self.hosts)
            .field("replication", &self.replication)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .field("schema", &self.schema)
            .field("layout", &self.layout)
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Parses `url`. [`locksmith_core::LockError::InvalidUrl`] for a missing host, an unknown
    /// option, or a schema that is not a plain lower-case identifier.
    pub fn parse(url: &BackendUrl) -> Result<Config> {
        if !matches!(url.scheme.as_str(), "postgres" | "postgresql") {
            return Err(url.error("expected a postgres:// or postgresql:// URL"));
        }
        url.expect_only_options(OPTIONS)?;
        let url = &libpq_tls_names(url)?;
        let hosts: Vec<(String, u16)> = url
            .expect_hosts()?
            .iter()
            .map(|h| (h.host.clone(), h.port.unwrap_or(DEFAULT_PORT)))
            .collect();
        let replication = match url.query.get("replication").map(String::as_str) {
            None if hosts.len() > 1 => Replication::Sync,
            None => Replication::AsConfigured,
            Some("sync") => Replication::Sync,
            Some("async") => Replication::Async,
            Some(other) => {
                return Err(url.error(format!(
                    "replication={other}: expected sync (a failover keeps every grant: the primary must have a \
                     synchronous standby) or async (a failover may hand a lock out twice)"
                )))
            }
        };
        let user = url.user().unwrap_or("postgres").to_owned();
        let db = match url.path.trim_end_matches('/') {
            "" => user.clone(),
            db if db.contains('/') => return Err(url.error("the path is one database name: postgres://host/db")),
            db => db.to_owned(),
        };
        let schema = url
            .query
            .get("schema")
            .cloned()
            .unwrap_or_else(|| DEFAULT_SCHEMA.into());
        if !is_identifier(&schema) {
            return Err(url.error(format!(
                "schema={schema}: expected a lower-case identifier ([a-z_][a-z0-9_]*, at most 40 characters)"
            )));
        }
        let tls = match url.query.get("sslmode").map(String::as_str) {
            None | Some("disable") => false,
            Some("require" | "verify-full") => true,
            Some(other) => {
                return Err(url.error(format!(
                    "sslmode={other}: expected disable, require or verify-full (both verify the server's \
                     certificate and name; locksmith never falls back to plain text)"
                )))
            }
        };
        let layout = match url.query.get("layout") {
            None => Layout::Tables,
            Some(text) => Layout::parse(text).ok_or_else(|| {
                url.error(format!(
                    "layout={text}: expected default or advisory (locks shared with pg_advisory_lock)"
                ))
            })?,
        };
        let listen = url
            .query
            .get("listen")
            .map(|hosts| listen_hosts(url, hosts))
            .transpose()?;
        if listen.is_some() && layout == Layout::Advisory {
            return Err(url.error(
                "layout=advisory holds session advisory locks, which a transaction pooler (listen=) cannot \
                 keep: point the URL at the server itself, or a session-mode pool, without listen=",
            ));
        }
        check_target_session_attrs(url)?;
        let files = url.tls_files()?;
        let names_files = files.ca.is_some() || files.identity.is_some() || files.server_name.is_some();
        if names_files && !tls {
            return Err(url.error("ca=, cert=, key= and server_name= need sslmode=require or verify-full"));
        }
        Ok(Config {
            connector: connector(url, tls, &files)?,
            tls,
            hosts,
            replication,
            password: url.password()?,
            user,
            db,
            ttl: url.lock_ttl_option()?,
            request_timeout: url.positive_duration_option("request_timeout", DEFAULT_REQUEST_TIMEOUT)?,
            connect_timeout: url.positive_duration_option("connect_timeout", DEFAULT_CONNECT_TIMEOUT)?,
            schema,
            layout,
            listen,
            application_name: (url.query.get("application_name").cloned()).unwrap_or_else(|| "locksmith".into()),
            options: url.query.get("options").cloned(),
            url: url.redacted(),
        })
    }

    /// Whether the URL's servers may be a transaction pooler (`listen=` says so): no session
    /// state is then left on a connection from one transaction to the next (`crate::conn`).
    pub fn pooled(&self) -> bool {
        self.listen.is_some()
    }

    /// The settings of the LISTEN connection: the URL's, on the `listen=` servers if given.
    pub fn for_listening(&self) -> Config {
        let mut listening = self.clone();
        if let Some(hosts) = &self.listen {
            listening.hosts = hosts.clone();
        }
        listening
    }

    /// The session's settings (user, database, password, TLS or not), for tokio-postgres's
    /// `connect_raw` on a socket of our own: the hosts, ports, time-outs, keep-alives and the
    /// choice of a primary among several hosts are `conn::dial`'s.
    pub fn client(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.ssl_mode(match self.tls {
            true => tokio_postgres::config::SslMode::Require,
            false => tokio_postgres::config::SslMode::Disable,
        });
        c.user(&self.user)
            .dbname(&self.db)
            .application_name(&self.application_name);
        if let Some(options) = &self.options {
            c.options(options);
        }
        if let Some(p) = &self.password {
            c.password(p);
        }
        c
    }
}

/// What connects with TLS when `tls` (from `files`).
#[cfg(feature = "tls")]
fn connector(url: &BackendUrl, tls: bool, files: &locksmith_core::driver::url::TlsFiles) -> Result<Connector> {
    match tls {
        true => crate::tls::Tls::new(url, files),
        false => Ok(crate::tls::Tls::off()),
    }
}

/// Without the `tls` feature: only plain connections.
#[cfg(not(feature = "tls"))]
fn connector(url: &BackendUrl, tls: bool, _files: &locksmith_core::driver::url::TlsFiles) -> Result<Connector> {
    match tls {
        true => Err(url.error("sslmode=require and verify-full need locksmith built with the `tls` feature (rustls)")),
        false => Ok(tokio_postgres::NoTls),
    }
}

/// `url` with libpq's names of the TLS files (`sslrootcert=`, `sslcert=`, `sslkey=`) given
/// locksmith's (`ca=`, `cert=`, `key=`); both names of one file is an error.
fn libpq_tls_names(url: &BackendUrl) -> Result<BackendUrl> {
    let mut url = url.clone();
    for (libpq, ours) in LIBPQ_TLS_NAMES {
        if let Some(path) = url.query.remove(libpq) {
            if url.query.contains_key(ours) {
                return Err(url.error(format!("{libpq}= and {ours}= name the same file: give one")));
            }
            url.query.insert(ours.to_owned(), path);
        }
    }
    Ok(url)
}

/// The hosts of `listen=host:port,…` (port 5432 by default).
fn listen_hosts(url: &BackendUrl, hosts: &str) -> Result<Vec<(String, u16)>> {
    let parsed = BackendUrl::parse(&format!("postgres://{hosts}"))
        .ok()
        .filter(|listen| !listen.hosts.is_empty() && listen.path.is_empty() && listen.credentials.is_none());
    let Some(parsed) = parsed else {
        return Err(url.error(format!(
            "listen={hosts}: expected host:port (or several, comma-separated): the server itself, or a \
             session-mode pool, for the LISTEN connection"
        )));
    };
    Ok(parsed
        .hosts
        .iter()
        .map(|h| (h.host.clone(), h.port.unwrap_or(DEFAULT_PORT)))
        .collect())
}

/// `target_session_attrs=`, as libpq spells it: locksmith writes on every step, so it always
/// looks for the server that accepts writes (`any`, `read-write` and `primary` say that); the
/// values that ask for a standby are refused.
fn check_target_session_attrs(url: &BackendUrl) -> Result<()> {
    match url.query.get("target_session_attrs").map(String::as_str) {
        None | Some("any" | "read-write" | "primary") => Ok(()),
        Some(other) => Err(url.error(format!(
            "target_session_attrs={other}: locksmith writes on every step, so it always connects to the \
             server that accepts writes (any, read-write or primary)"
        ))),
    }
}

/// A schema name we put in SQL unescaped (quoted): `[a-z_][a-z0-9_]*`, short enough for the
/// channel name built from it (63 bytes at most).
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    s.len() <= 40
        && chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Config> {
        Config::parse(&BackendUrl::parse(url)?)
    }

    #[test]
    fn urls_name_one_server_and_a_database() {
        let c = parse("postgres://u:secret@db.example:6543/app?schema=locks_1&ttl=5s").unwrap();
        assert_eq!(
            (c.hosts[0].0.as_str(), c.hosts[0].1, c.user.as_str(), c.db.as_str()),
            ("db.example", 6543, "u", "app")
        );
        assert_eq!(c.schema, "locks_1");
        assert_eq!(c.layout, Layout::Tables);
        assert_eq!(
            parse("postgres://h/x?layout=advisory").unwrap().layout,
            Layout::Advisory
        );
        assert_eq!(c.ttl, Some(Duration::from_secs(5)));
        assert!(!format!("{c:?}").contains("secret"));
        let d = parse("postgresql://me@h").unwrap();
        assert_eq!(
            (d.hosts[0].1, d.db.as_str(), d.schema.as_str()),
            (5432, "me", "locksmith")
        );
        assert_eq!(
            d.replication,
            Replication::AsConfigured,
            "one server: no standby asked for"
        );
        for bad in [
            "postgres://",
            "postgres://h/x?nope=1",
            "postgres://h/x?schema=Bad-Name",
            "postgres://h/a/b",
            "postgres://h/x?layout=plain",
            // Never a silent downgrade, nor a mode that would not verify the server.
            "postgres://h/x?sslmode=prefer",
            "postgres://h/x?sslmode=allow",
            "postgres://h/x?sslmode=verify-ca",
            // TLS files without TLS.
            "postgres://h/x?ca=/etc/ssl/ca.pem",
            "postgres://h/x?sslmode=disable&server_name=db",
            // A CA file that is not there.
            "postgres://h/x?sslmode=require&ca=/nonexistent/ca.pem",
            // Every request (or connection) would time out at once.
            "postgres://h/x?request_timeout=0",
            "postgres://h/x?connect_timeout=0ms",
            "postgres://a,b/x?replication=maybe",
        ] {
            assert!(
                matches!(parse(bad), Err(locksmith_core::LockError::InvalidUrl { .. })),
                "{bad} was accepted"
            );
        }
        assert!(!parse("postgres://h/x?sslmode=disable").unwrap().tls);
    }

    #[test]
    fn several_hosts_are_a_primary_and_its_synchronous_standbys() {
        let c = parse("postgres://u@db1:5433,db2/app").unwrap();
        assert_eq!(c.hosts, vec![("db1".to_owned(), 5433), ("db2".to_owned(), 5432)]);
        // A failover must keep every grant, unless the URL says otherwise.
        assert_eq!(c.replication, Replication::Sync);
        assert_eq!(
            parse("postgres://u@db1,db2/app?replication=async").unwrap().replication,
            Replication::Async
        );
        assert_eq!(
            parse("postgres://u@vip/app?replication=sync").unwrap().replication,
            Replication::Sync
        );
    }

    #[test]
    fn libpq_options_are_taken() {
        let c = parse(
            "postgres://u@h/x?application_name=billing&connect_timeout=10&options=-c%20search_path%3Dapp\
             &target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(c.application_name, "billing");
        assert_eq!(c.connect_timeout, Duration::from_secs(10), "libpq's bare seconds");
        assert_eq!(c.options.as_deref(), Some("-c search_path=app"));
        assert_eq!(parse("postgres://u@h/x").unwrap().application_name, "locksmith");
        for bad in [
            "postgres://u@h/x?target_session_attrs=standby",
            "postgres://u@h/x?target_session_attrs=read-only",
            "postgres://u@h/x?sslrootcert=/a.pem&ca=/b.pem",
        ] {
            assert!(
                matches!(parse(bad), Err(locksmith_core::LockError::InvalidUrl { .. })),
                "{bad} was accepted"
            );
        }
        // Every unknown option is named, not only the first.
        let e = parse("postgres://u@h/x?fallback_application_name=a&keepalives=1").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("\"fallback_application_name\"") && text.contains("\"keepalives\""),
            "{text}"
        );
    }

    #[test]
    fn listen_names_the_servers_of_the_listen_connection() {
        let c = parse("postgres://u@pooler:6432/x?listen=db1:5433,db2").unwrap();
        assert!(c.pooled());
        assert_eq!(c.listen, Some(vec![("db1".to_owned(), 5433), ("db2".to_owned(), 5432)]));
        let listening = c.for_listening();
        assert_eq!(
            listening.hosts,
            vec![("db1".to_owned(), 5433), ("db2".to_owned(), 5432)]
        );
        assert_eq!((listening.user.as_str(), listening.db.as_str()), ("u", "x"));
        assert!(!parse("postgres://u@h/x").unwrap().pooled());
        for bad in [
            "postgres://u@h/x?listen=",
            "postgres://u@h/x?listen=db/other",
            "postgres://u@h/x?listen=me@db",
            "postgres://u@h/x?listen=db:port",
            // Session advisory locks cannot live behind a transaction pooler.
            "postgres://u@h/x?listen=db&layout=advisory",
        ] {
            assert!(
                matches!(parse(bad), Err(locksmith_core::LockError::InvalidUrl { .. })),
                "{bad} was accepted"
            );
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn libpq_names_of_the_tls_files_are_taken() {
        let dir = std::env::temp_dir().join(format!("locksmith-pg-libpq-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("ca.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        // Read as ca=: the same refusal of a file that holds no certificate.
        let e = parse(&format!(
            "postgres://h/x?sslmode=require&sslrootcert={}",
            junk.display()
        ))
        .unwrap_err();
        assert!(e.to_string().contains("ca"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_modes_verify_the_server() {
        for mode in ["require", "verify-full"] {
            // The system's roots (the test machine has ca-certificates), no client certificate.
            let c = parse(&format!("postgres://u:pw@db.example/x?sslmode={mode}")).unwrap();
            assert!(c.tls);
            assert!(!format!("{c:?}").contains("pw"));
        }
        let junk = std::env::temp_dir().join(format!("locksmith-pg-junk-ca-{}", std::process::id()));
        std::fs::write(&junk, "not a certificate").unwrap();
        let bad = parse(&format!("postgres://h/x?sslmode=require&ca={}", junk.display()));
        assert!(
            matches!(bad, Err(locksmith_core::LockError::InvalidUrl { .. })),
            "{bad:?}"
        );
        std::fs::remove_file(&junk).ok();
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_needs_the_feature() {
        let e = parse("postgres://h/x?sslmode=require").unwrap_err();
        assert!(e.to_string().contains("`tls` feature"), "{e}");
    }
}
