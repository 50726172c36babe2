//! What every subcommand starts with: the options shared by all of them, connecting to the
//! backend, and acquiring a lock while staying responsive to signals.

use std::time::Duration;

use locksmith::driver::BackendUrl;
use locksmith::{ConnectOptions, LockBuilder, LockGuard, LockKind, Locker, DEFAULT_TTL};
use tokio::time::Instant;

use crate::args::Cli;
use crate::exit::{Failure, NOT_ACQUIRED, UNAVAILABLE};
use crate::output::{human, Output};
use crate::signals::{self, Signals};

/// How long a failed acquire waits for its clean-up (removing our place in the queue) before the
/// process exits: one round trip to a server that answers; a server that does not answer gets
/// nothing from waiting longer (our entry expires on it).
const SETTLE: Duration = Duration::from_millis(250);

/// The first pause before a connection attempt is made again ([`Session::connect_waiting`]).
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between connection attempts.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// How one connection attempt failed.
enum Attempt {
    /// The backend said why.
    Failed(locksmith::LockError),
    /// No answer within the connect timeout or `--timeout`.
    TimedOut(Failure),
}

impl From<Attempt> for Failure {
    fn from(attempt: Attempt) -> Failure {
        match attempt {
            Attempt::Failed(e) => Failure::from(e),
            Attempt::TimedOut(failure) => failure,
        }
    }
}

/// The global options of one invocation.
#[derive(Clone, Debug)]
pub struct Session {
    /// The backend URL, as given.
    pub url: String,
    /// The requested lease time.
    pub ttl: Duration,
    /// Whether `--ttl` was given (commands that have no use for it reject it).
    pub ttl_given: bool,
    /// How long the whole command may wait for the lock, connecting included (`None`: no limit).
    pub timeout: Option<Duration>,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// TLS files and the password file of the command line.
    pub secrets: (Option<String>, Option<String>, Option<String>, Option<String>),
    /// When the command started: `timeout` counts from here.
    pub started: Instant,
    /// Where results and status go.
    pub out: Output,
    /// The locker of the command, once connected: shut down before locksmith exits.
    connected: std::sync::Arc<std::sync::Mutex<Option<Locker>>>,
}

impl Session {
    /// The session of a parsed command line.
    pub fn new(cli: &Cli) -> Self {
        Session {
            url: cli.url.clone(),
            ttl: cli.ttl.unwrap_or(DEFAULT_TTL),
            ttl_given: cli.ttl.is_some(),
            timeout: cli.timeout,
            connect_timeout: cli.connect_timeout,
            secrets: (
                cli.ca.clone(),
                cli.cert.clone(),
                cli.key.clone(),
                cli.password_file.clone(),
            ),
            started: Instant::now(),
            out: Output {
                json: cli.json,
                quiet: cli.quiet,
            },
            connected: Default::default(),
        }
    }

    /// Shuts the command's locker down (if it connected) before locksmith exits, so that nothing
    /// this process took or queued for outlives it: a lock whose release was still in flight, a
    /// waiter's queue entry, the etcd session lease. A failure is logged, never the exit code:
    /// what was not confirmed expires after its TTL.
    pub async fn shutdown(&self) {
        let locker = self.connected.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(locker) = locker {
            if let Err(e) = locker.shutdown().await {
                tracing::warn!(error = %e, "shutting the connection down");
            }
        }
    }

    /// The URL for messages: as given, without its password.
    pub fn shown_url(&self) -> String {
        locksmith::driver::url::redact(&self.url)
    }

    /// When `--timeout` runs out, if it was given (`--timeout 0` is one attempt, not a deadline:
    /// connecting still gets its `--connect-timeout`).
    pub fn deadline(&self) -> Option<Instant> {
        self.timeout.filter(|t| !t.is_zero()).map(|t| self.started + t)
    }

    /// Fails with a usage error if `--ttl` was given to a command that has no use for it.
    pub fn reject_ttl(&self, command: &str) -> Result<(), Failure> {
        if self.ttl_given {
            return Err(Failure::new(
                crate::exit::USAGE,
                format!("`{command}` takes no lock, so --ttl means nothing to it (see locksmith --help)"),
            ));
        }
        Ok(())
    }

    /// Connects to the backend in one attempt, within the connect timeout and within `--timeout`
    /// (which bounds the whole command): for the commands that only look (`try`, `inspect`,
    /// `list`, `leader`). `--connect-timeout` is the backend's own connect timeout too, so it can
    /// lengthen the wait as well as shorten it; the URL's `connect_timeout=` wins over it.
    pub async fn connect(&self) -> Result<Locker, Failure> {
        Ok(self.connect_once().await?)
    }

    /// Connects to the backend for a command that waits for a lock (`run`, `hold`, `elect`): an
    /// attempt that finds the backend unavailable (nothing listening yet, the sentinels naming a
    /// master that is gone) is made again, after a pause that doubles from [`RETRY_FIRST`] up to
    /// [`RETRY_MAX`], until `--timeout` runs out (without it: until a signal). `--timeout 0` makes
    /// one attempt. Other errors (a bad URL, refused credentials) are never retried.
    pub async fn connect_waiting(&self) -> Result<Locker, Failure> {
        if self.timeout == Some(Duration::ZERO) {
            return self.connect().await;
        }
        let mut pause = RETRY_FIRST;
        let mut attempts = 0u32;
        let mut last: Option<Failure> = None;
        loop {
            let failure = match self.connect_once().await {
                Ok(locker) => return Ok(locker),
                Err(Attempt::Failed(e @ locksmith::LockError::Unavailable { .. })) => Failure::from(e),
                Err(Attempt::TimedOut(failure)) => failure,
                Err(e) => return Err(e.into()),
            };
            attempts += 1;
            let left = self.time_left();
            // Too little time for another attempt: this one's reason is the answer, unless it
            // was cut short by --timeout after an earlier one said more (connection refused).
            if left.is_some_and(|left| left < RETRY_FIRST) {
                return Err(match last.take() {
                    Some(earlier) if left == Some(Duration::ZERO) => earlier,
                    _ => failure,
                });
            }
            let wait = left.map_or(pause, |left| pause.min(left / 2));
            let until = left.map_or_else(
                || "without time limit".to_owned(),
                |t| format!("for up to {} more (--timeout)", human(t)),
            );
            if attempts == 1 {
                // A status line, which `-q` silences as it does every other one.
                self.out
                    .status(format_args!("{}; retrying {until}", failure.line(false)));
            } else {
                tracing::debug!(attempts, retry_in = ?wait, "{}; retrying {until}", failure.message);
            }
            last = Some(failure);
            tokio::time::sleep(wait).await;
            pause = (pause * 2).min(RETRY_MAX);
        }
    }

    /// One connection attempt, bounded by the connect timeout and by `--timeout`.
    async fn connect_once(&self) -> Result<Locker, Attempt> {
        if self.url.trim_start().to_ascii_lowercase().starts_with("mem:") {
            tracing::debug!("mem:// is in-process only: other locksmith processes do not see these locks");
        }
        // etcd and ZooKeeper enforce one TTL per connection (session), not per lock: a locksmith
        // process holds one lock, so --ttl is the session TTL there, unless the URL sets one.
        let (ca, cert, key, password_file) = self.secrets.clone();
        let mut options = ConnectOptions::new()
            .connect_timeout(self.connect_timeout)
            .session_ttl(self.ttl)
            .tls_files(ca, cert, key);
        if let Some(file) = password_file {
            options = options.password_file(file);
        }
        let url_timeout = BackendUrl::parse(&self.url)
            .ok()
            .and_then(|u| u.duration_option("connect_timeout").ok().flatten());
        let mut limit = url_timeout.unwrap_or(self.connect_timeout);
        let mut why = "--connect-timeout";
        if let Some(deadline) = self.deadline() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left < limit {
                (limit, why) = (left, "--timeout");
            }
        }
        // The backend gives up after its own connect timeout; this bound is for --timeout and
        // for a backend that would not.
        match tokio::time::timeout(limit, locksmith::connect_with(&self.url, &options)).await {
            Ok(result) => {
                let locker = result.map_err(Attempt::Failed)?;
                *self.connected.lock().unwrap_or_else(|e| e.into_inner()) = Some(locker.clone());
                Ok(locker)
            }
            Err(_) => Err(Attempt::TimedOut(Failure::new(
                UNAVAILABLE,
                format!(
                    "backend unavailable: no connection to {} within {} ({why})",
                    self.shown_url(),
                    human(limit)
                ),
            ))),
        }
    }

    /// Runs `call`, a read of the backend's (`inspect`, `list`, `leader`), within what is left of
    /// `--timeout` (without limit when none was given); past it, exit 3.
    pub async fn within_timeout<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, locksmith::LockError>>,
    ) -> Result<T, Failure> {
        let Some(left) = self.time_left() else {
            return Ok(call.await?);
        };
        match tokio::time::timeout(left, call).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(Failure::new(
                UNAVAILABLE,
                format!("backend unavailable: no answer within {} (--timeout)", human(left)),
            )),
        }
    }

    /// The time left until `--timeout` runs out (`None`: no limit; zero: it has run out).
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline().map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The request for `kind` of `name`, with `--ttl` if it was given (else the URL's `ttl=` on
    /// the backends whose TTL is per lock, else the library's default).
    pub fn request(&self, locker: &Locker, name: &str, kind: LockKind) -> LockBuilder {
        let request = locker.request(name, kind);
        if self.ttl_given {
            request.ttl(self.ttl)
        } else {
            request
        }
    }

    /// Acquires `kind` of `name` as the options say: one attempt for `--timeout 0`, else wait
    /// until `--timeout` runs out (counted from the start of the command), or without limit. A
    /// signal received meanwhile abandons the wait (nothing is left behind on the server) and
    /// fails with 128+signal.
    pub async fn acquire(
        &self,
        locker: &Locker,
        name: &str,
        kind: LockKind,
        signals: &mut Signals,
    ) -> Result<LockGuard, Failure> {
        let builder = self.request(locker, name, kind);
        if self.timeout == Some(Duration::ZERO) {
            return match builder.try_acquire().await? {
                Some(guard) => Ok(guard),
                None => Err(Failure::new(
                    NOT_ACQUIRED,
                    format!("{name:?} is held by another holder"),
                )),
            };
        }
        let builder = match self.time_left() {
            Some(t) => builder.timeout(t),
            None => builder,
        };
        let tasks_before = alive_tasks();
        // Boxed so that it can be dropped (and clean up) before we return.
        let mut acquire = Box::pin(builder.acquire());
        // Say that we wait only when the lock is not granted at once.
        let announce = tokio::time::sleep(Duration::from_millis(300));
        tokio::pin!(announce);
        let mut announced = false;
        loop {
            tokio::select! {
                result = &mut acquire => {
                    if let Err(e) = &result {
                        // A failed acquire leaves its clean-up (removing our place in the queue)
                        // to a spawned task: give it one round trip before the process exits,
                        // unless the server is not answering anyway.
                        drop(acquire);
                        if !matches!(e, locksmith::LockError::Unavailable { .. }) {
                            settle(tasks_before, SETTLE).await;
                        }
                    }
                    return Ok(result?);
                }
                () = &mut announce, if !announced => {
                    announced = true;
                    let limit = self.time_left().map_or_else(|| "without time limit".to_owned(), |t| format!("up to {}", human(t)));
                    self.out.status(format_args!("waiting for {name:?} ({limit})"));
                }
                sig = signals.recv() => {
                    drop(acquire);
                    // The dropped acquire spawned its clean-up; give it a moment to reach the server.
                    settle(tasks_before, SETTLE).await;
                    let message = format!("interrupted by {} while waiting for {name:?}", signals::name(sig));
                    return Err(Failure::new(signals::interrupted(sig), message));
                }
            }
        }
    }
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current().metrics().num_alive_tasks()
}

/// Waits until no more tasks are alive than `baseline` (the clean-up tasks spawned by dropped
/// futures have finished), at most `limit`.
async fn settle(baseline: usize, limit: Duration) {
    let end = Instant::now() + limit;
    while alive_tasks() > baseline && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
