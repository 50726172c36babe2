//! The URL: `postgres://user:password@host:port/db?ttl=…&request_timeout=…&connect_timeout=…&schema=…`.

use std::fmt;
use std::time::Duration;

use lockcore::driver::{BackendUrl, DEFAULT_REQUEST_TIMEOUT};
use lockcore::Result;

/// The URL options this backend accepts.
pub const OPTIONS: &[&str] = &["ttl", "request_timeout", "connect_timeout", "schema", "password_file"];

/// The default server port.
const DEFAULT_PORT: u16 = 5432;
/// The default schema of the tables.
const DEFAULT_SCHEMA: &str = "locksmith";
/// The default `connect_timeout`.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed `postgres://` URL. Its `Debug` never shows the password.
#[derive(Clone)]
pub(crate) struct Config {
    /// The server's host.
    pub host: String,
    /// Its port.
    pub port: u16,
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
    /// The longest a connection may take to open (`connect_timeout=`, default 5 s).
    pub connect_timeout: Duration,
    /// The schema of the tables (`schema=`, default `locksmith`).
    pub schema: String,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Parses `url`. [`lockcore::LockError::InvalidUrl`] for a missing or second host, an unknown
    /// option, or a schema that is not a plain lower-case identifier.
    pub fn parse(url: &BackendUrl) -> Result<Config> {
        url.expect_only_options(OPTIONS)?;
        let host = match url.expect_hosts()? {
            [h] => h,
            _ => return Err(url.error("postgres:// takes one server: postgres://user:password@host:5432/db")),
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
        Ok(Config {
            host: host.host.clone(),
            port: host.port.unwrap_or(DEFAULT_PORT),
            password: url.password()?,
            user,
            db,
            ttl: url.lock_ttl_option()?,
            request_timeout: url
                .duration_option("request_timeout")?
                .unwrap_or(DEFAULT_REQUEST_TIMEOUT),
            connect_timeout: url
                .duration_option("connect_timeout")?
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            schema,
        })
    }

    /// The client's configuration (no TLS in this version).
    pub fn client(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.db)
            .application_name("locksmith")
            .connect_timeout(self.connect_timeout);
        if let Some(p) = &self.password {
            c.password(p);
        }
        c
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
            (c.host.as_str(), c.port, c.user.as_str(), c.db.as_str()),
            ("db.example", 6543, "u", "app")
        );
        assert_eq!(c.schema, "locks_1");
        assert_eq!(c.ttl, Some(Duration::from_secs(5)));
        assert!(!format!("{c:?}").contains("secret"));
        let d = parse("postgresql://me@h").unwrap();
        assert_eq!((d.port, d.db.as_str(), d.schema.as_str()), (5432, "me", "locksmith"));
        for bad in [
            "postgres://",
            "postgres://h/x?nope=1",
            "postgres://h/x?schema=Bad-Name",
            "postgres://h/a/b",
        ] {
            assert!(
                matches!(parse(bad), Err(lockcore::LockError::InvalidUrl { .. })),
                "{bad} was accepted"
            );
        }
    }
}
