//! Backend URLs: `scheme://host1:port1,host2:port2/path?key=value&...`.
//!
//! The `url` crate cannot parse a comma-separated host list, so this is a small parser of our own.
//! The facade picks a backend by [`BackendUrl::scheme`]; each backend reads its own hosts, path and
//! query options from the parsed form and rejects options it does not know.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{LockError, Result};
use crate::lease::{MAX_TTL, MIN_TTL};

/// One `host:port` of a backend URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// A host name, an IPv4 address, or an IPv6 address without brackets.
    pub host: String,
    /// The port, or the backend's default if the URL gave none.
    pub port: Option<u16>,
}

impl HostPort {
    /// `host:port` with the given default port, with brackets around IPv6 addresses.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// let url = locksmith::driver::BackendUrl::parse("etcd://[::1],h2:2380")?;
    /// assert_eq!(url.hosts[0].to_addr(2379), "[::1]:2379");
    /// assert_eq!(url.hosts[1].to_addr(2379), "h2:2380");
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn to_addr(&self, default_port: u16) -> String {
        let port = self.port.unwrap_or(default_port);
        if self.host.contains(':') {
            format!("[{}]:{port}", self.host)
        } else {
            format!("{}:{port}", self.host)
        }
    }
}

/// A parsed backend URL.
///
/// Its `Debug` output, [`BackendUrl::redacted`] and every error it makes hide the password.
#[derive(Clone)]
pub struct BackendUrl {
    raw: String,
    /// The scheme, lower-cased: `mem`, `etcd`, `zk`, `redis`, ...
    pub scheme: String,
    /// Optional `user:password@` credentials (percent-decoded), applied to every host.
    pub credentials: Option<(String, Option<String>)>,
    /// The hosts, in order. Empty for `mem://`.
    pub hosts: Vec<HostPort>,
    /// The path without its leading `/` (percent-decoded); empty if none.
    pub path: String,
    /// Query parameters (percent-decoded). Each key at most once.
    pub query: BTreeMap<String, String>,
}

impl BackendUrl {
    /// Parses `url`, rejecting what is malformed with [`LockError::InvalidUrl`].
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidUrl`] (with the password hidden) for a URL without `scheme://`, a bad
    /// scheme, host or port, a fragment (`#…`), an `@` after the host, a bad percent escape, or
    /// a query key given twice.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// let url = locksmith::driver::BackendUrl::parse("etcd://u:secret@h1:2379,h2/ns?ttl=10s")?;
    /// assert_eq!((url.scheme.as_str(), url.hosts.len(), url.path.as_str()), ("etcd", 2, "ns"));
    /// assert!(!url.redacted().contains("secret"));
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |reason: &str| LockError::InvalidUrl {
            url: redact(url),
            reason: reason.to_owned(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected scheme://hosts/path, e.g. etcd://127.0.0.1:2379"))?;
        if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
            return Err(bad("the scheme is empty or has invalid characters"));
        }
        let (rest, query_str) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        if rest.contains('#') || query_str.is_some_and(|q| q.contains('#')) {
            return Err(bad("fragments (#...) are not allowed"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        // An `@` after the host part while the host part has none: most likely a password with
        // an unescaped `/`, `?` or `#`, cut there. Its pieces would be read as a host, a port, a
        // path or a query, and quoted in errors (`invalid port "ab"`) or connected to: say so
        // without quoting anything. (An `@` in a path is refused for the same reason.)
        let cut_password = !authority.is_empty()
            && !authority.contains('@')
            && (path.contains('@') || query_str.is_some_and(|q| q.contains('@')));
        if cut_password && path.contains('@') {
            return Err(bad(
                "an '@' after the host: percent-encode '/', '?', '#' and '@' in a user name or password \
                 (%2F, %3F, %23, %40), and '@' in a path (%40)",
            ));
        }
        let (credentials, hosts_str) = match authority.rsplit_once('@') {
            Some((creds, hosts)) => {
                let (user, pass) = match creds.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (creds, None),
                };
                let user = percent_decode(user).ok_or_else(|| bad("bad escape in the user name"))?;
                let pass = match pass {
                    Some(p) => Some(percent_decode(p).ok_or_else(|| bad("bad escape in the password"))?),
                    None => None,
                };
                (Some((user, pass)), hosts)
            }
            None => (None, authority),
        };
        let mut hosts = Vec::new();
        if !hosts_str.is_empty() {
            for part in hosts_str.split(',') {
                hosts.push(parse_host(part).map_err(|r| match cut_password {
                    false => bad(&r),
                    true => bad(
                        "invalid host or port (if a user name or password has '/', '?', '#' or '@', \
                         percent-encode them: %2F, %3F, %23, %40)",
                    ),
                })?);
            }
        }
        let path = percent_decode(path.trim_end_matches('/')).ok_or_else(|| bad("bad escape in the path"))?;
        let mut query = BTreeMap::new();
        if let Some(q) = query_str {
            for pair in q.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                let k = percent_decode(k).ok_or_else(|| bad("bad escape in a query key"))?;
                let v = percent_decode(v).ok_or_else(|| bad("bad escape in a query value"))?;
                if query.insert(k.clone(), v).is_some() {
                    return Err(bad(&format!("query parameter {k:?} is given twice")));
                }
            }
        }
        Ok(BackendUrl {
            raw: url.to_owned(),
            scheme: scheme.to_ascii_lowercase(),
            credentials,
            hosts,
            path,
            query,
        })
    }

    /// The URL as given (with its password, if it has one: see [`BackendUrl::redacted`]).
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The URL as given, with its password (if any) replaced by `***`: for messages and logs.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// let url = locksmith::driver::BackendUrl::parse("postgres://app:secret@db/app")?;
    /// assert_eq!(url.redacted(), "postgres://app:***@db/app");
    /// assert!(url.as_str().contains("secret"));
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn redacted(&self) -> String {
        redact(&self.raw)
    }

    /// An [`LockError::InvalidUrl`] for this URL (redacted) with the given reason.
    pub fn error(&self, reason: impl Into<String>) -> LockError {
        LockError::InvalidUrl {
            url: self.redacted(),
            reason: reason.into(),
        }
    }

    /// The password: the URL's own (`user:password@`), else the contents of the file named by the
    /// `password_file` option (one trailing newline dropped), else the `LOCKSMITH_PASSWORD`
    /// environment variable; `None` when none of them is set. A file that cannot be read is
    /// [`LockError::InvalidUrl`] naming the file, never its contents.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidUrl`] naming the `password_file` when it cannot be read.
    ///
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// let url = locksmith::driver::BackendUrl::parse("redis://app:s%40cret@h")?;
    /// assert_eq!((url.user(), url.password()?.as_deref()), (Some("app"), Some("s@cret")));
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn password(&self) -> Result<Option<String>> {
        if let Some((_, Some(password))) = &self.credentials {
            return Ok(Some(password.clone()));
        }
        if let Some(path) = self.query.get("password_file") {
            let text = std::fs::read_to_string(path)
                .map_err(|e| self.error(format!("password_file {path:?} cannot be read: {e}")))?;
            let password = text.strip_suffix('\n').unwrap_or(&text);
            let password = password.strip_suffix('\r').unwrap_or(password);
            return Ok(Some(password.to_owned()));
        }
        Ok(std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()))
    }

    /// The user name of `user:password@`, if any.
    pub fn user(&self) -> Option<&str> {
        self.credentials
            .as_ref()
            .map(|(user, _)| user.as_str())
            .filter(|u| !u.is_empty())
    }

    /// The TLS options of the URL ([`TLS_OPTIONS`]), with their files read. `cert` and `key` go
    /// together. A file that cannot be read is [`LockError::InvalidUrl`] naming it.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidUrl`] when a `ca`, `cert` or `key` file cannot be read, or only one of
    /// `cert` and `key` is given.
    pub fn tls_files(&self) -> Result<TlsFiles> {
        let read = |key: &str| -> Result<Option<Vec<u8>>> {
            match self.query.get(key) {
                None => Ok(None),
                Some(path) => std::fs::read(path)
                    .map(Some)
                    .map_err(|e| self.error(format!("{key}={path:?} cannot be read: {e}"))),
            }
        };
        let identity = match (read("cert")?, read("key")?) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err(self.error("cert and key go together (a client certificate and its private key)")),
        };
        Ok(TlsFiles {
            ca: read("ca")?,
            identity,
            server_name: self.query.get("server_name").cloned(),
        })
    }

    /// Sets the query option `key` to `value` unless the URL sets it itself: how a program (the
    /// CLI's `--connect-timeout`, say) gives a default that the URL can still override. What
    /// [`BackendUrl::as_str`] and messages show stays the URL as given.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// let mut url = locksmith::driver::BackendUrl::parse("etcd://h?connect_timeout=1s")?;
    /// url.set_default_option("connect_timeout", "5s"); // the URL's own wins
    /// url.set_default_option("ttl", "10s");
    /// assert_eq!((url.query["connect_timeout"].as_str(), url.query["ttl"].as_str()), ("1s", "10s"));
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn set_default_option(&mut self, key: &str, value: impl Into<String>) {
        self.query.entry(key.to_owned()).or_insert_with(|| value.into());
    }

    /// Fails unless every query key is one of `known`: a misspelt option must not be ignored.
    /// The error names every unknown key, then the known ones.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidUrl`] naming the unknown keys and the known ones.
    ///
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// let url = locksmith::driver::BackendUrl::parse("mem://?tll=5s")?;
    /// assert!(matches!(url.expect_only_options(&["ttl"]), Err(locksmith::LockError::InvalidUrl { .. })));
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn expect_only_options(&self, known: &[&str]) -> Result<()> {
        let unknown: Vec<String> = (self.query.keys())
            .filter(|k| !known.contains(&k.as_str()))
            .map(|k| format!("{k:?}"))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(self.error(format!(
            "unknown option{} {} for {}:// (known: {})",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", "),
            self.scheme,
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )))
    }

    /// Fails unless the URL names at least one host.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidUrl`] for a URL without a host.
    pub fn expect_hosts(&self) -> Result<&[HostPort]> {
        if self.hosts.is_empty() {
            Err(self.error(format!("{}:// needs at least one host", self.scheme)))
        } else {
            Ok(&self.hosts)
        }
    }

    /// The `ttl` option of a backend whose TTL is per lock (Redis, `mem://`): the TTL of the locks
    /// whose builder sets none (see [`crate::backend::LockBackend::default_ttl`]). `None` if absent;
    /// [`LockError::InvalidUrl`] unless it is a duration within
    /// [`crate::MIN_TTL`]..=[`crate::MAX_TTL`].
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidUrl`] for a `ttl` that is not a duration (see
    /// [`BackendUrl::duration_option`]) or is outside [`crate::MIN_TTL`]..=[`crate::MAX_TTL`].
    pub fn lock_ttl_option(&self) -> Result<Option<Duration>> {
        let Some(ttl) = self.duration_option("ttl")? else {
            return Ok(None);
        };
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return Err(self.error(format!(
                "ttl={ttl:?} is outside the allowed range {MIN_TTL:?}..={MAX_TTL:?}"
            )));
        }
        Ok(Some(ttl))
    }

    /// A duration option such as `ttl=10s`, `connect_timeout=500ms` (units `ms`, `s`, `m`, `h`; a
    /// bare number is seconds), at most [`MAX_OPTION_DURATION`]. `None` if absent.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidUrl`] for a value that is not a duration, or one longer than
    /// [`MAX_OPTION_DURATION`].
    ///
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// use std::time::Duration;
    /// let url = locksmith::driver::BackendUrl::parse("redis://h?request_timeout=500ms&ttl=soon")?;
    /// assert_eq!(url.duration_option("request_timeout")?, Some(Duration::from_millis(500)));
    /// assert!(url.duration_option("ttl").is_err());
    /// assert_eq!(url.duration_option("connect_timeout")?, None);
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn duration_option(&self, key: &str) -> Result<Option<Duration>> {
        let Some(v) = self.query.get(key) else {
            return Ok(None);
        };
        let d = parse_duration(v)
            .ok_or_else(|| self.error(format!("option {key}={v:?} is not a duration like 500ms, 10s or 2m")))?;
        if d > MAX_OPTION_DURATION {
            // Timeouts are added to the clock: one beyond what it can hold would panic.
            return Err(self.error(format!(
                "option {key}={v:?} is longer than {MAX_OPTION_DURATION:?}, the longest any duration option may be"
            )));
        }
        Ok(Some(d))
    }

    /// A timeout or interval option that must not be zero (`request_timeout=`,
    /// `connect_timeout=`, ...): `default` if absent, [`LockError::InvalidUrl`] if it is zero (every
    /// request would fail at once) or longer than [`MAX_OPTION_DURATION`].
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidUrl`] as above, and as [`BackendUrl::duration_option`].
    pub fn positive_duration_option(&self, key: &str, default: Duration) -> Result<Duration> {
        match self.duration_option(key)? {
            None => Ok(default),
            Some(d) if d.is_zero() => Err(self.error(format!("{key} must be greater than zero"))),
            Some(d) => Ok(d),
        }
    }
}

/// The longest a duration option of a URL may be (a day, as [`MAX_TTL`]): no timeout, delay or
/// lease of locksmith's is longer, and one that no clock can hold would panic where it is added to
/// the time.
pub const MAX_OPTION_DURATION: Duration = MAX_TTL;

/// The environment variable that gives a password the URL does not (see [`BackendUrl::password`]).
pub const PASSWORD_ENV: &str = "LOCKSMITH_PASSWORD";

/// The URL options of TLS, the same on every backend: `ca` (a PEM bundle of the certificates to
/// trust instead of the system's), `cert` and `key` (a client certificate and its key, for
/// mutual TLS), `server_name` (the name to verify the server's certificate against, when it is
/// not the host in the URL).
pub const TLS_OPTIONS: &[&str] = &["ca", "cert", "key", "server_name"];

/// The URL options of credentials, the same on every backend: `password_file`.
pub const SECRET_OPTIONS: &[&str] = &["password_file"];

/// The TLS settings of a URL, with the files read ([`BackendUrl::tls_files`]).
#[derive(Clone, Default)]
pub struct TlsFiles {
    /// The PEM certificates to trust (`ca`); `None`: the system's roots.
    pub ca: Option<Vec<u8>>,
    /// The client certificate and private key, PEM (`cert`, `key`).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to verify the server's certificate against (`server_name`).
    pub server_name: Option<String>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("ca", &self.ca.as_ref().map(|c| format!("{} bytes", c.len())))
            .field("identity", &self.identity.as_ref().map(|_| "a certificate and its key"))
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl std::fmt::Debug for BackendUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BackendUrl").field(&self.redacted()).finish()
    }
}

/// `url` with the password of its `user:password@` part replaced by `***` (a URL without one is
/// returned as it is).
///
/// A password should have its `/`, `?`, `#` and `@` percent-encoded; one that has them as they
/// are ends the host part early, or puts an `@` after it. So everything from the first `:` to
/// the last `@` of the whole URL is hidden: more than the password when that `@` was in a path
/// or a query (a `postgres://…?ca=/a@b`), but never less. Text that is no URL (no `://`: a
/// mistyped scheme, a libpq connection string) shows only what comes before its first `:` when
/// it has an `@`, a `=` or a space, where a password may be.
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith;
/// use locksmith::driver::url::redact;
/// assert_eq!(redact("redis://app:secret@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(redact("mem://"), "mem://");
/// ```
pub fn redact(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        if !url.contains(['@', '=', ' ']) {
            return url.to_owned();
        }
        return match url.split_once(':') {
            Some((scheme, _)) if !scheme.contains(['@', '=', ' ']) => format!("{scheme}:***"),
            _ => "***".to_owned(),
        };
    };
    let Some(at) = url[start..].rfind('@').map(|i| start + i) else {
        return redact_query(url);
    };
    match url[start..at].find(':').map(|i| start + i) {
        Some(colon) => redact_query(&format!("{}:***{}", &url[..colon], &url[at..])),
        None => redact_query(url),
    }
}

/// `url` with the values of query options that name a secret (`password=`, `token=`, …, as
/// libpq's connection strings and some clients take them) replaced by `***`: no backend takes
/// one, and the error that says so quotes the URL.
fn redact_query(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let secret = |key: &str| {
        let key = key.to_ascii_lowercase();
        ["pass", "pwd", "secret", "token", "auth"]
            .iter()
            .any(|s| key.contains(s))
    };
    let options: Vec<String> = (query.split('&'))
        .map(|option| match option.split_once('=') {
            Some((key, _)) if secret(key) && !key.ends_with("_file") => format!("{key}=***"),
            _ => option.to_owned(),
        })
        .collect();
    format!("{base}?{}", options.join("&"))
}

/// Parses `500ms`, `10s`, `2m`, `1h` or a bare number of seconds.
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith;
/// use std::time::Duration;
/// use locksmith::driver::url::parse_duration;
/// assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
/// assert_eq!(parse_duration("10"), Some(Duration::from_secs(10)));
/// assert_eq!(parse_duration("10 s"), None);
/// ```
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    match unit {
        "" | "s" => Some(Duration::from_secs(n)),
        "ms" => Some(Duration::from_millis(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

fn parse_host(part: &str) -> std::result::Result<HostPort, String> {
    if part.is_empty() {
        return Err("empty host in the host list".into());
    }
    let (host, port) = if let Some(rest) = part.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or("unclosed [ in an IPv6 host")?;
        match after {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':').ok_or("expected :port after ]")?)),
        }
    } else {
        match part.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (part, None),
        }
    };
    if host.is_empty() {
        return Err(format!("invalid host {host:?}"));
    }
    // A name or an IPv4 address; an IPv6 address (and its `%zone`) only in brackets. Anything
    // else (a space, `%20`, a control character) would fail only at connect time, as a server
    // that cannot be reached, which callers retry.
    let bracketed = part.starts_with('[');
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c) || (bracketed && ":%".contains(c));
    if let Some(bad) = host.chars().find(|c| !allowed(*c)) {
        let hint = match bad {
            ':' => " (an IPv6 address goes in brackets, e.g. [::1]:2379)",
            _ => " (a host is a name or an address: letters, digits, '-', '.', '_')",
        };
        return Err(format!("invalid host {host:?}{hint}"));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err(format!("invalid port {p:?} for host {host:?}")),
            Ok(n) => Some(n),
        },
    };
    Ok(HostPort {
        host: host.to_owned(),
        port,
    })
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            // Two hex digits; `from_str_radix` alone would also take a sign (`%+2`).
            let hex = s
                .get(i + 1..i + 3)
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ttl_option_is_a_ttl_within_range() {
        let ttl = |url: &str| BackendUrl::parse(url).unwrap().lock_ttl_option();
        assert_eq!(ttl("mem://").unwrap(), None);
        assert_eq!(ttl("mem://x?ttl=2s").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(ttl("redis://h?ttl=50ms").unwrap(), Some(MIN_TTL));
        assert_eq!(ttl("redis://h?ttl=24h").unwrap(), Some(MAX_TTL));
        assert_eq!(
            ttl("mem://x?ttl=1ms").unwrap_err().to_string(),
            "invalid backend URL \"mem://x?ttl=1ms\": ttl=1ms is outside the allowed range 50ms..=86400s"
        );
        // A timeout no clock can hold (it panicked where it was added to the time, in the
        // renewal task: a file:// or postgres:// lock was then never renewed).
        let huge = BackendUrl::parse("file:///tmp/l?request_timeout=10000000000000000000").unwrap();
        let err = huge.duration_option("request_timeout").unwrap_err().to_string();
        assert!(err.contains("longer than 86400s"), "{err}");
        let day = BackendUrl::parse("redis://h?connect_timeout=24h").unwrap();
        assert_eq!(
            day.duration_option("connect_timeout").unwrap(),
            Some(MAX_OPTION_DURATION)
        );
        for bad in ["mem://?ttl=0", "mem://?ttl=25h", "mem://?ttl=soon"] {
            assert!(matches!(ttl(bad), Err(LockError::InvalidUrl { .. })), "{bad}");
        }
    }

    #[test]
    fn parses_multi_host_urls() {
        let u = BackendUrl::parse("etcd://h1:2379,h2:2380,[::1]:1/ns/x?ttl=10s&layout=go-mutex").unwrap();
        assert_eq!(u.scheme, "etcd");
        assert_eq!(u.hosts.len(), 3);
        assert_eq!(u.hosts[1].to_addr(1), "h2:2380");
        assert_eq!(u.hosts[2].to_addr(1), "[::1]:1");
        assert_eq!(u.path, "ns/x");
        assert_eq!(u.duration_option("ttl").unwrap(), Some(Duration::from_secs(10)));
        assert!(u.expect_only_options(&["ttl"]).is_err());
        assert!(u.expect_only_options(&["ttl", "layout"]).is_ok());
    }

    #[test]
    fn parses_credentials_and_defaults() {
        let u = BackendUrl::parse("redis://:s%40cret@localhost/0").unwrap();
        assert_eq!(u.credentials, Some((String::new(), Some("s@cret".into()))));
        assert_eq!(u.hosts[0].to_addr(6379), "localhost:6379");
        assert_eq!(u.path, "0");
        let m = BackendUrl::parse("mem://").unwrap();
        assert!(m.hosts.is_empty() && m.path.is_empty());
    }

    #[test]
    fn rejects_malformed_urls() {
        for bad in [
            "etcd",
            "://h",
            "etcd://h:notaport",
            "etcd://h:0",
            "etcd://h:70000",
            "etcd://h1,,h2",
            "etcd://[::1/x",
            "etcd://h?a=1&a=2",
            "etcd://h/%zz",
            "etcd://h#frag",
            // A sign is not a hex digit.
            "etcd://h/%+2",
            // IPv6 without brackets (it was read as host ":" or "fe80:", port 1).
            "etcd://::1",
            "etcd://fe80::1",
            // Hosts no server has: they failed only at connect, as an outage retried for ever.
            "etcd://a%20b:2379",
            "etcd://h%00/x",
            "redis://a b/0",
        ] {
            assert!(
                matches!(BackendUrl::parse(bad), Err(LockError::InvalidUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn passwords_never_show() {
        for (url, shown) in [
            ("redis://:s%40cret@h:1/0", "redis://:***@h:1/0"),
            ("etcd://user:pw@h1,h2/ns?x=1", "etcd://user:***@h1,h2/ns?x=1"),
            ("zk://user@h", "zk://user@h"),
            ("redis://h/0?a=b@c", "redis://h/0?a=b@c"),
        ] {
            assert_eq!(redact(url), shown);
            let parsed = BackendUrl::parse(url).unwrap();
            assert_eq!(parsed.redacted(), shown);
            assert!(!format!("{parsed:?}").contains("cret") && !format!("{parsed:?}").contains("pw@"));
            assert!(!parsed.error("x").to_string().contains("cret"));
        }
        let bad = BackendUrl::parse("etcd://u:topsecret@h:notaport").unwrap_err();
        assert!(!bad.to_string().contains("topsecret"), "{bad}");
        // A password with a '/', '?' or '#' left unescaped ends the host part early: the error
        // (or, where it still parses, the URL's Debug and redacted forms) must not show it.
        // Each piece of each password is checked, not only the whole: the parts before and
        // after the unescaped character were quoted as a host, a port or a path.
        for (url, pieces) in [
            ("redis://u:ab/cd@h:6379", &["ab", "cd"][..]),
            ("redis://u:pq#wz@h", &["pq", "wz"]),
            ("redis://u:pq?wz@h", &["pq", "wz"]),
            ("redis://admin:1234/xy@h", &["1234", "xy"]),
            ("redis://u:p!ss/xy@h", &["p!ss", "xy"]),
            ("redis://u:ab@cd/ef@h", &["ab", "cd", "ef"]),
        ] {
            let shown = match BackendUrl::parse(url) {
                Ok(parsed) => format!("{} {parsed:?} {}", parsed.redacted(), parsed.error("x")),
                Err(e) => e.to_string(),
            };
            for secret in pieces {
                assert!(!shown.contains(secret), "{url}: {secret:?} shows in {shown}");
            }
        }
        // Not URLs at all (a scheme's `//` mistyped, a libpq connection string): nothing after
        // what may be a scheme shows where a password may be. (Before, they showed whole.)
        for (text, secret) in [
            ("redis:/admin:s3cret@h", "s3cret"),
            ("redis//admin:s3cret@h", "s3cret"),
            ("host=db user=app password=s3cret", "s3cret"),
            ("postgres:app:s3cret@db/x", "s3cret"),
        ] {
            let shown = BackendUrl::parse(text).unwrap_err().to_string();
            assert!(!shown.contains(secret), "{text}: shows in {shown}");
        }
        assert_eq!(redact("redis:/localhost:6379"), "redis:/localhost:6379");
        // A password as a query option (libpq's style), which no backend takes: the error that
        // says so quotes the URL. (Before, it showed whole.)
        for url in [
            "postgres://app@db/x?password=s3cret",
            "redis://h/0?a=1&auth_token=s3cret",
        ] {
            assert!(!redact(url).contains("s3cret"), "{}", redact(url));
        }
        assert_eq!(
            redact("postgres://h/x?password_file=/run/pw"),
            "postgres://h/x?password_file=/run/pw"
        );
    }

    #[test]
    fn passwords_come_from_the_url_a_file_or_the_environment() {
        let dir = std::env::temp_dir().join(format!("locksmith-url-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "from-file\n").unwrap();
        let url = |q: &str| BackendUrl::parse(&format!("redis://u:in-url@h{q}")).unwrap();
        assert_eq!(url("").password().unwrap().as_deref(), Some("in-url"));
        let with_file = BackendUrl::parse(&format!("redis://u@h?password_file={}", file.display())).unwrap();
        assert_eq!(with_file.password().unwrap().as_deref(), Some("from-file"));
        assert_eq!(with_file.user(), Some("u"));
        let missing = BackendUrl::parse("redis://u@h?password_file=/nonexistent/secret").unwrap();
        let e = missing.password().unwrap_err().to_string();
        assert!(e.contains("/nonexistent/secret"), "{e}");
        let tls = BackendUrl::parse(&format!("etcds://h?ca={}&server_name=x", file.display())).unwrap();
        let files = tls.tls_files().unwrap();
        assert_eq!(files.ca.as_deref(), Some(&b"from-file\n"[..]));
        assert_eq!(files.server_name.as_deref(), Some("x"));
        assert!(!format!("{files:?}").contains("from-file"));
        let half = BackendUrl::parse(&format!("etcds://h?cert={}", file.display())).unwrap();
        assert!(half.tls_files().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn defaults_do_not_override_the_url() {
        let mut u = BackendUrl::parse("etcd://h?ttl=5s").unwrap();
        u.set_default_option("ttl", "1s");
        u.set_default_option("connect_timeout", "2s");
        assert_eq!(u.query["ttl"], "5s");
        assert_eq!(u.query["connect_timeout"], "2s");
        assert_eq!(u.as_str(), "etcd://h?ttl=5s");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("x"), None);
        assert_eq!(parse_duration("5d"), None);
    }
}
