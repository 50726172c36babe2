//! The URL: `file:///absolute/dir?ttl=…&request_timeout=…`.

use std::path::PathBuf;
use std::time::Duration;

use locksmith_core::driver::{BackendUrl, DEFAULT_REQUEST_TIMEOUT};
use locksmith_core::Result;

/// The URL options this backend accepts.
pub const OPTIONS: &[&str] = &["ttl", "request_timeout", "sync"];

/// A parsed `file://` URL.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The lock directory (absolute).
    pub dir: PathBuf,
    /// The TTL of locks whose builder sets none (`ttl=`).
    pub ttl: Option<Duration>,
    /// The longest one step may take (`request_timeout=`, default 5 s): a step waits for the
    /// lock file's `flock`, which a process paused in the middle of its step holds.
    pub request_timeout: Duration,
    /// Whether a step that hands out a fencing token syncs the state file and the directory before
    /// the token is returned (`sync=grant`, the default), or only renames the file (`sync=off`:
    /// tokens then survive a power cut only through the wall-clock floor, see `protocol/queue.rs`).
    pub sync: bool,
}

impl Config {
    /// Parses `url`. [`locksmith_core::LockError::InvalidUrl`] for a relative or missing directory,
    /// a host other than `localhost`, credentials, or an unknown option.
    pub fn parse(url: &BackendUrl) -> Result<Config> {
        url.expect_only_options(OPTIONS)?;
        let local = match url.hosts.as_slice() {
            [] => true,
            [h] => h.host.eq_ignore_ascii_case("localhost") && h.port.is_none(),
            _ => false,
        };
        if !local || url.credentials.is_some() {
            return Err(url
                .error("file:// takes an absolute directory on this machine: file:///run/lock/myapp (three slashes)"));
        }
        if url.path.is_empty() {
            return Err(url.error("file:// needs a directory: file:///run/lock/myapp"));
        }
        Ok(Config {
            dir: PathBuf::from(format!("/{}", url.path)),
            ttl: url.lock_ttl_option()?,
            request_timeout: url.positive_duration_option("request_timeout", DEFAULT_REQUEST_TIMEOUT)?,
            sync: match url.query.get("sync").map(String::as_str) {
                None | Some("grant") => true,
                Some("off") => false,
                Some(other) => return Err(url.error(format!("sync={other}: expected sync=grant or sync=off"))),
            },
        })
    }
}

/// The directory that `locksmith` uses when given no URL: `$XDG_RUNTIME_DIR/locksmith` (the
/// user's own runtime directory), else `locksmith-<uid>` in the temporary directory. Every process
/// of one user finds the same one.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(runtime) => PathBuf::from(runtime).join("locksmith"),
        None => std::env::temp_dir().join(format!("locksmith-{}", rustix::process::getuid().as_raw())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Config> {
        Config::parse(&BackendUrl::parse(url)?)
    }

    #[test]
    fn urls_name_an_absolute_directory() {
        let c = parse("file:///run/lock/my%20app?ttl=5s").unwrap();
        assert_eq!(c.dir, PathBuf::from("/run/lock/my app"));
        assert_eq!(c.ttl, Some(Duration::from_secs(5)));
        assert_eq!(parse("file://localhost/tmp/x").unwrap().dir, PathBuf::from("/tmp/x"));
        assert!(parse("file:///x").unwrap().sync);
        assert!(!parse("file:///x?sync=off").unwrap().sync);
        for bad in [
            "file://",
            "file:///",
            "file://host/x",
            "file://u:p@/x",
            "file:///x?nope=1",
            "file://./x",
            "file:///x?ttl=0s",
            // Every request would time out at once.
            "file:///x?request_timeout=0",
        ] {
            assert!(
                matches!(parse(bad), Err(locksmith_core::LockError::InvalidUrl { .. })),
                "{bad} was accepted"
            );
        }
    }
}
