//! The URL: `file:///absolute/dir?ttl=…&request_timeout=…`.

use std::path::{Path, PathBuf};
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
    /// Whether `dir` is the [`default_dir`], which must be this user's own (see
    /// `private_dir.rs`); a directory of the user's choice may be shared with others.
    pub private: bool,
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
        let dir = PathBuf::from(format!("/{}", url.path));
        Ok(Config {
            private: dir == default_dir(),
            dir,
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

/// [`locksmith_core::LockError::InvalidUrl`] when the URL's directory `dir` can never be one: a
/// name in it too long for a file system (over 255 bytes), a path too long, a NUL byte, a loop
/// of links, or a part of it that exists and is not a directory (`file:///etc/passwd/locks`).
/// Those fail the same way on every retry, so they are the URL's fault rather than the file
/// system's for now (which would be [`locksmith_core::LockError::Unavailable`], retried by
/// callers that wait for the backend).
pub fn check_dir(url: &BackendUrl, dir: &Path) -> Result<()> {
    const NAME_MAX: usize = 255;
    for part in dir.components() {
        let bytes = part.as_os_str().as_encoded_bytes();
        if bytes.contains(&0) {
            return Err(url.error("the directory's path contains a NUL byte"));
        }
        if bytes.len() > NAME_MAX {
            return Err(url.error(format!(
                "a name in the directory's path is {} bytes long; file systems take at most {NAME_MAX}",
                bytes.len()
            )));
        }
    }
    // The deepest part of the path that exists must be a directory (links followed: /var/run).
    // A path through a file, too long or looping fails at once (`/etc/passwd/.`, whose ancestors
    // skip `/etc/passwd`).
    use rustix::io::Errno;
    let never = [Errno::NOTDIR, Errno::NAMETOOLONG, Errno::LOOP].map(Errno::raw_os_error);
    for existing in dir.ancestors() {
        match std::fs::metadata(existing) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => {
                return Err(url.error(format!(
                    "{} is not a directory, so no lock directory can be made at {}",
                    existing.display(),
                    dir.display()
                )))
            }
            Err(e) if e.raw_os_error().is_some_and(|code| never.contains(&code)) => {
                return Err(url.error(format!("no lock directory can be made at {}: {e}", dir.display())));
            }
            Err(_) => {}
        }
    }
    Ok(())
}

/// The directory that `locksmith` uses when given no URL: `/tmp/locksmith-<uid>`. Every process
/// of one user finds the same one, whatever its environment: a cron job (no `XDG_RUNTIME_DIR`,
/// maybe another `TMPDIR`) and the same command typed in a desktop or ssh session take the same
/// locks. (`$XDG_RUNTIME_DIR` differs between them, and logind removes it at the user's last
/// logout, with the lock files in it.) Since `/tmp` is everyone's, locksmith creates it mode 0700
/// and refuses it unless it is the user's own (see `private_dir.rs`).
pub fn default_dir() -> PathBuf {
    PathBuf::from(format!("/tmp/locksmith-{}", rustix::process::getuid().as_raw()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Config> {
        Config::parse(&BackendUrl::parse(url)?)
    }

    /// Set in the child processes of `every_session_of_a_user_has_the_same_default_dir`.
    const CHILD: &str = "LOCKSMITH_FILE_DEFAULT_DIR_CHILD";

    /// Prints the default directory when run as a child of
    /// `every_session_of_a_user_has_the_same_default_dir` (with the environment under test, set
    /// on the child rather than on this process of parallel tests); nothing otherwise.
    #[test]
    fn print_default_dir() {
        if std::env::var_os(CHILD).is_some() {
            println!("default_dir={}", default_dir().display());
        }
    }

    /// A cron job (no `XDG_RUNTIME_DIR`) and a desktop session (with it, and maybe a `TMPDIR` of
    /// its own) find the same default directory, so their commands exclude each other.
    #[test]
    fn every_session_of_a_user_has_the_same_default_dir() {
        let in_session = |vars: &[(&str, Option<&str>)]| {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap());
            child
                .args([
                    "config::tests::print_default_dir",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "1");
            for (var, value) in vars {
                match value {
                    Some(value) => child.env(var, value),
                    None => child.env_remove(var),
                };
            }
            let out = child.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            stdout
                .lines()
                .find_map(|l| l.split_once("default_dir=").map(|(_, dir)| dir))
                .map(PathBuf::from)
                .unwrap_or_else(|| panic!("the child printed no directory: {out:?}"))
        };
        let cron = in_session(&[("XDG_RUNTIME_DIR", None), ("TMPDIR", None)]);
        let desktop = in_session(&[
            ("XDG_RUNTIME_DIR", Some("/run/user/4242")),
            ("TMPDIR", Some("/var/tmp")),
        ]);
        let uid = rustix::process::getuid().as_raw();
        assert_eq!(cron, PathBuf::from(format!("/tmp/locksmith-{uid}")));
        assert_eq!(
            desktop, cron,
            "a desktop session and a cron job use different lock directories"
        );
    }

    #[test]
    fn urls_name_an_absolute_directory() {
        let c = parse("file:///run/lock/my%20app?ttl=5s").unwrap();
        assert_eq!(c.dir, PathBuf::from("/run/lock/my app"));
        assert_eq!(c.ttl, Some(Duration::from_secs(5)));
        assert_eq!(parse("file://localhost/tmp/x").unwrap().dir, PathBuf::from("/tmp/x"));
        assert!(parse("file:///x").unwrap().sync);
        assert!(!parse("file:///x?sync=off").unwrap().sync);
        assert!(!parse("file:///x").unwrap().private);
        assert!(parse(&format!("file://{}", default_dir().display())).unwrap().private);
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

    /// A directory that can never be made is the URL's fault, not a failure worth retrying: a
    /// caller that waits for the backend (`locksmith run`) waited for ever on
    /// `file:///etc/passwd`.
    #[test]
    fn a_directory_that_cannot_be_one_is_a_bad_url() {
        let long = "n".repeat(256);
        for bad in [
            "file:///etc/passwd".to_owned(),
            "file:///etc/passwd/locks".to_owned(),
            format!("file:///tmp/{long}"),
            "file:///tmp/a%00b".to_owned(),
            "file:///etc/passwd/.".to_owned(),
            "file:///etc/passwd%2F".to_owned(),
            format!("file:///tmp/{}", ["d"; 3000].join("/")),
        ] {
            let url = BackendUrl::parse(&bad).unwrap();
            let Ok(config) = Config::parse(&url) else { continue };
            assert!(
                matches!(
                    check_dir(&url, &config.dir),
                    Err(locksmith_core::LockError::InvalidUrl { .. })
                ),
                "{bad} was accepted"
            );
        }
        for good in ["file:///tmp/locksmith-check-dir/a/b", "file:///tmp"] {
            let url = BackendUrl::parse(good).unwrap();
            check_dir(&url, &parse(good).unwrap().dir).unwrap();
        }
    }
}
