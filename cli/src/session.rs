//! What every subcommand starts with: the options shared by all of them, connecting to the
//! backend, and acquiring a lock while staying responsive to signals.

use std::time::Duration;

use locksmith::{BackendUrl, LockGuard, Locker};
use tokio::time::Instant;

use crate::args::Cli;
use crate::exit::{Failure, NOT_ACQUIRED, UNAVAILABLE};
use crate::output::{human, Output};
use crate::signals::{self, Signals};

/// The global options of one invocation.
#[derive(Clone, Debug)]
pub struct Session {
    /// The backend URL.
    pub url: String,
    /// The requested lease time.
    pub ttl: Duration,
    /// How long to wait for a held lock (`None`: without limit).
    pub timeout: Option<Duration>,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// Where results and status go.
    pub out: Output,
}

impl Session {
    /// The session of a parsed command line.
    pub fn new(cli: &Cli) -> Self {
        Session {
            url: cli.url.clone(),
            ttl: cli.ttl,
            timeout: cli.timeout,
            connect_timeout: cli.connect_timeout,
            out: Output {
                json: cli.json,
                quiet: cli.quiet,
            },
        }
    }

    /// Connects to the backend within the connect timeout.
    pub async fn connect(&self) -> Result<Locker, Failure> {
        if self.url.trim_start().to_ascii_lowercase().starts_with("mem:") {
            tracing::debug!("mem:// is in-process only: other locksmith processes do not see these locks");
        }
        let url = url_with_session_ttl(&self.url, self.ttl);
        match tokio::time::timeout(self.connect_timeout, locksmith::connect(&url)).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(Failure::new(
                UNAVAILABLE,
                format!(
                    "backend unavailable: no connection to {} within {}",
                    self.url,
                    human(self.connect_timeout)
                ),
            )),
        }
    }

    /// Acquires `name` as the options say: one attempt for `--timeout 0`, else wait up to the
    /// timeout (or without limit). A signal received meanwhile abandons the wait (nothing is left
    /// behind on the server) and fails with 128+signal.
    pub async fn acquire(&self, locker: &Locker, name: &str, signals: &mut Signals) -> Result<LockGuard, Failure> {
        let builder = locker.lock(name).ttl(self.ttl);
        if self.timeout == Some(Duration::ZERO) {
            return match builder.try_acquire().await? {
                Some(guard) => Ok(guard),
                None => Err(Failure::new(
                    NOT_ACQUIRED,
                    format!("{name:?} is held by another holder"),
                )),
            };
        }
        let builder = match self.timeout {
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
                    if result.is_err() {
                        // A timed-out acquire leaves its clean-up (e.g. removing our place in the
                        // queue) to a spawned task: let it finish before the process exits.
                        drop(acquire);
                        settle(tasks_before, Duration::from_secs(2)).await;
                    }
                    return Ok(result?);
                }
                () = &mut announce, if !announced => {
                    announced = true;
                    let limit = self.timeout.map_or_else(|| "without time limit".to_owned(), |t| format!("up to {}", human(t)));
                    self.out.status(format_args!("waiting for {name:?} ({limit})"));
                }
                sig = signals.recv() => {
                    drop(acquire);
                    // The dropped acquire spawned its clean-up; give it a moment to reach the server.
                    settle(tasks_before, Duration::from_secs(2)).await;
                    let message = format!("interrupted by {} while waiting for {name:?}", signals::name(sig));
                    return Err(Failure::new(128 + sig as u8, message));
                }
            }
        }
    }
}

/// etcd and ZooKeeper enforce one session TTL per connection, set by the URL's `ttl` option, and
/// ignore the per-lock TTL. A locksmith process holds one lock, so `--ttl` becomes the session TTL
/// there, unless the URL sets one itself.
fn url_with_session_ttl(url: &str, ttl: Duration) -> String {
    let Ok(parsed) = BackendUrl::parse(url) else {
        return url.to_owned();
    };
    let session_based = matches!(parsed.scheme.as_str(), "etcd" | "zk");
    if !session_based || parsed.query.contains_key("ttl") || parsed.query.contains_key("session_timeout") {
        return url.to_owned();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}ttl={}ms", ttl.as_millis())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_becomes_the_session_ttl_on_etcd_and_zookeeper() {
        let ttl = Duration::from_secs(3);
        assert_eq!(
            url_with_session_ttl("etcd://h:2379/ns", ttl),
            "etcd://h:2379/ns?ttl=3000ms"
        );
        assert_eq!(url_with_session_ttl("zk://h?x=1", ttl), "zk://h?x=1&ttl=3000ms");
        assert_eq!(url_with_session_ttl("etcd://h?ttl=5s", ttl), "etcd://h?ttl=5s");
        assert_eq!(
            url_with_session_ttl("zk://h?session_timeout=5s", ttl),
            "zk://h?session_timeout=5s"
        );
        assert_eq!(url_with_session_ttl("redis://h", ttl), "redis://h");
        assert_eq!(url_with_session_ttl("not a url", ttl), "not a url");
    }
}
