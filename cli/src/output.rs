//! Where things are printed: results to stdout (text or `--json`), status to stderr.

use std::io::Write;
use std::time::Duration;

use locksmith::LockGuard;
use serde_json::{json, Value};

/// The output settings of one invocation.
#[derive(Clone, Copy, Debug)]
pub struct Output {
    /// Results as JSON.
    pub json: bool,
    /// No status messages.
    pub quiet: bool,
}

impl Output {
    /// A status line on stderr (unless `--quiet`).
    pub fn status(&self, message: impl std::fmt::Display) {
        if !self.quiet {
            stderr_line(format_args!("locksmith: {message}"));
        }
    }

    /// A result on stdout: `value` with `--json`, else `text`. Flushed at once, so that a script
    /// reading our stdout sees it while we keep running. Returns whether it was written: `false`
    /// once stdout is closed (its reader went away).
    pub fn result(&self, text: impl std::fmt::Display, value: Value) -> bool {
        let mut out = std::io::stdout().lock();
        let written = if self.json {
            writeln!(out, "{value}")
        } else {
            writeln!(out, "{text}")
        };
        // A closed stdout (the reader went away) must not stop us from releasing the lock.
        if written.and_then(|()| out.flush()).is_err() {
            tracing::debug!("stdout is closed; result not printed");
            return false;
        }
        true
    }

    /// The result of an acquired lock: its fencing token (text), or its details (JSON). Whether
    /// it was printed (`false`: stdout is closed; the lock is held all the same).
    pub fn acquired(&self, guard: &LockGuard) -> bool {
        let value = json!({
            "name": guard.name(),
            "acquired": true,
            "fencing_token": guard.fencing_token(),
            "ttl_ms": millis(guard.ttl()),
            "holder_id": guard.lease().holder_id,
        });
        self.result(guard.fencing_token(), value)
    }
}

/// Writes `line` and a newline to stderr, and goes on if it cannot: `eprintln!` panics on a
/// stderr whose reader went away (`locksmith hold N 2>&1 | head -1`), and a panic there would end
/// the process while it holds a lock. One `write(2)` for the whole line (stderr is unbuffered:
/// `writeln!` made one per piece of the format), so that the lines of processes sharing a stderr
/// do not interleave mid-line.
pub fn stderr_line(line: impl std::fmt::Display) {
    let line = format!("{line}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// A duration in whole milliseconds, for JSON.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A duration for people: `850ms`, `12.3s`.
pub fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// `text` (a lock name, a candidate's value, a holder id) as one field of a line of text output:
/// as it is, or quoted with escapes (`"a\nb"`, as Rust prints a string) when it holds a control
/// character, so that a name with a line break or a tab cannot split a line of `list` or fake a
/// row; also when it starts with a quote or holds a backslash, so that no name reads as another
/// one quoted. The JSON output has the text as it is.
pub fn field(text: &str) -> std::borrow::Cow<'_, str> {
    if text.starts_with('"') || text.contains('\\') || text.chars().any(char::is_control) {
        format!("{text:?}").into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::field;

    /// Quoted when it could split a line or read as another name quoted; as it is otherwise.
    #[test]
    fn a_field_is_quoted_only_when_it_must_be() {
        assert_eq!(field("orders/42"), "orders/42");
        assert_eq!(field("a\nb"), "\"a\\nb\"");
        assert_eq!(field("a\tb"), "\"a\\tb\"");
        // The name `"a\nb"` (quotes and a backslash) is not the name a⏎b.
        assert_eq!(field("\"a\\nb\""), "\"\\\"a\\\\nb\\\"\"");
        assert_ne!(field("\"a\\nb\""), field("a\nb"));
        assert_eq!(field("x\\y"), "\"x\\\\y\"");
    }
}
