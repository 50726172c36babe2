//! Exit codes, and the one error type the subcommands return: a code and a one-line reason.

use std::error::Error as _;

use locksmith::LockError;

/// The lock was not acquired: held by another (with `--timeout 0` or `try`), or the timeout passed.
pub const NOT_ACQUIRED: u8 = 1;
/// Bad usage or invalid input: empty name, bad URL, unknown scheme, TTL out of range.
pub const USAGE: u8 = 2;
/// The backend could not be reached or answered with something unexpected.
pub const UNAVAILABLE: u8 = 3;
/// The lock was lost while held (`run`, `hold`).
pub const LOST: u8 = 4;
/// The server refused the credentials (wrong user or password) or our identity's permissions.
pub const DENIED: u8 = 5;
/// `run`: CMD was found but could not be executed (shell convention).
pub const CANNOT_EXECUTE: u8 = 126;
/// `run`: CMD was not found (shell convention).
pub const NOT_FOUND: u8 = 127;
/// `leader --follow`, `try`: stdout's reader went away (128+SIGPIPE, what a shell reports for a
/// program killed by the write to a closed pipe); `try` released the lock it could not report.
pub const STDOUT_CLOSED: u8 = 141;

/// The exit codes, as `--help` shows them.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0        success (`try`: acquired; `run`/`elect`: CMD exited 0; `leader`: someone leads)
  N        `run`/`elect`: CMD's own exit code (128+SIG if CMD was killed by signal SIG;
           killed by SIGINT (Ctrl-C), locksmith releases and then dies of SIGINT too, so
           that a calling shell's loop or script stops as it would for CMD alone)
  1        not acquired: held by another (`try`, `--timeout 0`) or the timeout passed;
           `leader`: nobody leads
  2        usage error or invalid input (empty name, bad URL, unknown scheme, TTL 0)
  3        backend unavailable
  4        the lock (or leadership) was lost while held (`run`/`elect`: CMD got SIGTERM, then
           SIGKILL after --grace)
  5        refused, for a reason no retry mends: wrong user or password, a database that
           does not exist, not permitted (an ACL, a lock directory locksmith may not write),
           or TLS that cannot be established (the server has no TLS, its certificate
           is not trusted by ca=, is for another name or expired, or it refused ours)
  126/127  `run`/`elect`: CMD could not be executed / was not found
  128+SIG  interrupted by signal SIG before the lock was acquired
  141      `leader --follow`, `try`: stdout was closed (its reader went away; `try` released
           the lock whose token it could not print)
  101      internal error (a bug: please report it)

Status messages go to stderr, results (fencing tokens, inspect output) to stdout.";

/// Why a subcommand did not succeed: the exit code and a one-line reason for stderr.
#[derive(Debug)]
pub struct Failure {
    /// The process exit code.
    pub code: u8,
    /// One line, without the `locksmith: ` prefix.
    pub message: String,
    /// What the client library said underneath (the error's sources, on one line), shown with `-v`.
    pub detail: Option<String>,
    /// The innermost of those sources (a certificate nobody vouches for, a host name that does
    /// not resolve), shown without `-v`: the why of a failure that no retry mends.
    pub cause: Option<String>,
}

impl Failure {
    /// A failure with the given code and message.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            detail: None,
            cause: None,
        }
    }

    /// The line to print (without the `locksmith: ` prefix): the message, and what the client
    /// library said underneath, in full with `verbose`, else its innermost cause.
    pub fn line(&self, verbose: bool) -> String {
        let below = if verbose { &self.detail } else { &self.cause };
        match below {
            Some(below) => format!("{}: {below}", self.message),
            None => self.message.clone(),
        }
    }
}

/// The longest cause shown without `-v`: a client library's innermost error is usually short,
/// and one that dumps a whole response (a gRPC status with its metadata) is left to `-v`.
const CAUSE_MAX_CHARS: usize = 200;

impl From<LockError> for Failure {
    fn from(e: LockError) -> Self {
        let code = match &e {
            LockError::Timeout(_) => NOT_ACQUIRED,
            LockError::InvalidName(_)
            | LockError::InvalidOption(_)
            | LockError::InvalidUrl { .. }
            | LockError::WouldDeadlock { .. }
            | LockError::BlockingInAsync { .. } => USAGE,
            LockError::NotHeld { .. } | LockError::Lost { .. } => LOST,
            LockError::Denied(_) => DENIED,
            _ => UNAVAILABLE,
        };
        let mut message = e.to_string().replace(['\n', '\r'], " ");
        if refused(&e) && !message.to_ascii_lowercase().contains("connection refused") {
            message.push_str(": connection refused");
        }
        let detail = sources(&e);
        let cause = innermost(&e).filter(|cause| !says(&message, cause));
        Failure {
            code,
            detail: (!detail.is_empty() && !message.contains(&detail)).then_some(detail),
            cause,
            message,
        }
    }
}

/// Whether `message` says what `cause` says already, whatever the case: all of it, or all
/// after a leading label (PostgreSQL's `FATAL: `, an I/O error's `(os error 111)` aside).
fn says(message: &str, cause: &str) -> bool {
    let message = message.to_lowercase();
    let cause = cause.to_lowercase();
    let unlabelled = cause.split_once(": ").map_or(cause.as_str(), |(_, rest)| rest);
    let bare = |text: &str| text.split(" (os error").next().unwrap_or(text).trim().to_owned();
    // A few words at least: a short remainder ("eof") would match a message by chance.
    let said = |text: String| text.len() >= 12 && message.contains(&text);
    message.contains(&cause) || said(bare(unlabelled)) || said(bare(&cause))
}

/// The text of `e`'s innermost source, on one line, unless it is empty or longer than
/// [`CAUSE_MAX_CHARS`].
fn innermost(e: &LockError) -> Option<String> {
    let mut last = None;
    let mut source = e.source();
    while let Some(s) = source {
        last = Some(s);
        source = s.source();
    }
    let text = last?.to_string().replace(['\n', '\r'], " ");
    let text = text.trim();
    (!text.is_empty() && text.chars().count() <= CAUSE_MAX_CHARS).then(|| text.to_owned())
}

/// Whether a connection was refused underneath `e` (nothing listens at the address): an
/// [`std::io::Error`] of kind [`std::io::ErrorKind::ConnectionRefused`] among its sources, or a
/// source that says so in words (client libraries that keep only the text of the I/O error).
pub fn refused(e: &LockError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        let text = s.to_string().to_ascii_lowercase();
        if text.contains("connection refused") || text.contains("kind: connectionrefused") {
            return true;
        }
        source = s.source();
    }
    false
}

/// The error's sources on one line (what the client library said), or an empty string.
pub fn sources(e: &LockError) -> String {
    let mut line = String::new();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        source = s.source();
    }
    line.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_their_codes() {
        assert_eq!(
            Failure::from(LockError::Timeout(std::time::Duration::ZERO)).code,
            NOT_ACQUIRED
        );
        assert_eq!(Failure::from(LockError::InvalidName("x".into())).code, USAGE);
        // Work under a lock that was lost is a lost lock (exit 4), not an outage (it was 3).
        let lost = LockError::Lost {
            name: "x".into(),
            reason: locksmith::LostReason::MaxHoldReached,
        };
        assert_eq!(Failure::from(lost).code, LOST);
        let deadlock = LockError::WouldDeadlock {
            name: "x".into(),
            held: "the mutex".into(),
            fencing_token: 1,
        };
        assert_eq!(Failure::from(deadlock).code, USAGE);
        assert_eq!(Failure::from(LockError::BlockingInAsync { call: "x" }).code, USAGE);
        let unavailable = LockError::unavailable("connecting", std::io::Error::other("refused\nnow"));
        let failure = Failure::from(unavailable);
        assert_eq!(failure.code, UNAVAILABLE);
        assert_eq!(failure.message, "backend unavailable: connecting");
        assert_eq!(failure.detail.as_deref(), Some("refused now"));
        assert_eq!(failure.line(false), "backend unavailable: connecting: refused now");
    }

    /// Without `-v` the line names the innermost cause (a certificate nobody vouches for, which
    /// no retry mends), the whole chain with it; a cause the message has, or a dump of a whole
    /// response, is left out. (The cause was shown only with `-v`: a wrong CA read "backend
    /// unavailable: connecting on redis at …", and `run` retried it for ever without a why.)
    #[test]
    fn the_line_names_the_innermost_cause() {
        #[derive(Debug)]
        struct Layer(&'static str, Option<std::io::Error>);
        impl std::fmt::Display for Layer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Layer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_ref().map(|e| e as _)
            }
        }
        let tls = Layer(
            "TLS handshake",
            Some(std::io::Error::other("invalid peer certificate: UnknownIssuer")),
        );
        let failure = Failure::from(LockError::unavailable("connecting on redis at h:1", tls));
        assert_eq!(
            failure.line(false),
            "backend unavailable: connecting on redis at h:1: invalid peer certificate: UnknownIssuer"
        );
        assert_eq!(
            failure.line(true),
            "backend unavailable: connecting on redis at h:1: TLS handshake: invalid peer certificate: UnknownIssuer"
        );
        let said = LockError::unavailable("connecting: invalid peer certificate: UnknownIssuer", tls_error());
        assert_eq!(
            Failure::from(said).line(false),
            "backend unavailable: connecting: invalid peer certificate: UnknownIssuer"
        );
        let dump = LockError::unavailable("connecting", std::io::Error::other("x".repeat(300)));
        assert_eq!(Failure::from(dump).line(false), "backend unavailable: connecting");
        // What the message says already is not said again: a refused connection (the line adds
        // "connection refused" itself), a server's error under its severity.
        let refused = LockError::unavailable("connecting on redis at h:1", std::io::Error::from_raw_os_error(111));
        assert_eq!(
            Failure::from(refused).line(false),
            "backend unavailable: connecting on redis at h:1: connection refused"
        );
        let fatal = LockError::unavailable(
            "postgres: connecting: sorry, too many clients already (53300)",
            std::io::Error::other("FATAL: sorry, too many clients already"),
        );
        assert_eq!(
            Failure::from(fatal).line(false),
            "backend unavailable: postgres: connecting: sorry, too many clients already (53300)"
        );
    }

    fn tls_error() -> std::io::Error {
        std::io::Error::other("invalid peer certificate: UnknownIssuer")
    }

    #[test]
    fn a_refused_connection_says_so() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let failure = Failure::from(LockError::unavailable("connecting on redis at 127.0.0.1:1", refused));
        assert_eq!(failure.code, UNAVAILABLE);
        assert!(failure.message.ends_with(": connection refused"), "{}", failure.message);
        let other = LockError::unavailable("connecting", std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(!Failure::from(other).message.contains("refused"));
    }
}
