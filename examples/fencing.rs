//! Fencing tokens: why a lock alone cannot protect storage, and how a token can.
//!
//! Process A takes the lock, writes, and is then paused (a GC pause, a stopped VM) past its TTL:
//! it stops renewing. The lease expires, process B takes the lock with a larger fencing token and
//! writes. A wakes up, still believing it holds the lock, and writes again — with its old token.
//! The storage remembers the largest token it has accepted and rejects the late write.
//!
//! ```text
//! cargo run --example fencing                         # embedded backend, no server needed
//! LOCKSMITH_URL=redis://127.0.0.1:6379 cargo run --example fencing --features redis
//! ```

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use locksmith::Locker;

/// Errors of this example: lock errors and storage rejections.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A storage that accepts a write only with a fencing token at least as large as the largest it
/// has accepted so far. (In a real system this check lives in the storage: a conditional update
/// `... WHERE fencing_token <= $token`, an object-store precondition, a version column.)
#[derive(Debug, Default)]
pub struct Storage {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    highest_token: u64,
    accepted: Vec<(u64, String)>,
}

/// A write rejected because a newer holder has written already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleToken {
    /// The token the write came with.
    pub token: u64,
    /// The largest token the storage has accepted.
    pub highest: u64,
}

impl fmt::Display for StaleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "write with fencing token {} rejected: token {} was already used",
            self.token, self.highest
        )
    }
}

impl std::error::Error for StaleToken {}

impl Storage {
    /// Writes `value` if `token` is not older than any token written before.
    pub fn write(&self, token: u64, value: &str) -> Result<(), StaleToken> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if token < state.highest_token {
            return Err(StaleToken {
                token,
                highest: state.highest_token,
            });
        }
        state.highest_token = token;
        state.accepted.push((token, value.to_owned()));
        Ok(())
    }

    /// The accepted writes, in order, with their tokens.
    pub fn accepted(&self) -> Vec<(u64, String)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).accepted.clone()
    }
}

/// What happened in [`paused_holder`].
#[derive(Debug)]
pub struct Report {
    /// The token of A, the holder that was paused.
    pub paused_token: u64,
    /// The token of B, who took the lock after A's lease expired.
    pub next_token: u64,
    /// The outcome of A's write after it woke up.
    pub late_write: Result<(), StaleToken>,
    /// What the storage accepted.
    pub accepted: Vec<(u64, String)>,
}

/// Plays the scenario on the backend at `url` with lock `name` and lease time `ttl`.
pub async fn paused_holder(url: &str, name: &str, ttl: Duration) -> Result<Report, Error> {
    // Two connections, as two processes would have.
    let process_a = locksmith::connect(url).await?;
    let process_b = locksmith::connect(url).await?;
    let report = play(&process_a, &process_b, name, ttl).await;
    // Before returning: releases what an early `?` dropped and ends both sessions, so the lock is
    // free at once rather than after its TTL. Both run, even if one fails.
    let (a, b) = tokio::join!(process_a.shutdown(), process_b.shutdown());
    a?;
    b?;
    report
}

/// The scenario itself, with A's and B's lockers.
async fn play(process_a: &Locker, process_b: &Locker, name: &str, ttl: Duration) -> Result<Report, Error> {
    let storage = Storage::default();
    let guard = process_a.lock(name).ttl(ttl).acquire().await?;
    let paused_token = guard.fencing_token();
    storage.write(paused_token, "A: before the pause")?;
    println!(
        "A: holds {name} with token {paused_token} (lease {:?}), wrote",
        guard.ttl()
    );

    // A is paused: nothing renews its lease any more, and nothing releases it. `abandon` is
    // exactly that (a long sleep with the watchdog stopped); A keeps its token in hand.
    let stale = guard.abandon();
    println!("A: paused (no renewal)");

    // B waits for the lock; it gets it once the server has expired A's lease.
    let b = process_b
        .lock(name)
        .ttl(ttl)
        .timeout(ttl * 10 + Duration::from_secs(60))
        .acquire()
        .await?;
    let next_token = b.fencing_token();
    storage.write(next_token, "B: after A's lease expired")?;
    println!("B: holds {name} with token {next_token}, wrote");

    // A wakes up, unaware that its lease is gone, and writes with its old token.
    let late_write = storage.write(stale.fencing_token, "A: after the pause");
    match &late_write {
        Ok(()) => println!("A: late write ACCEPTED (this must not happen)"),
        Err(e) => println!("A: late write rejected by the storage: {e}"),
    }
    b.release().await?;
    Ok(Report {
        paused_token,
        next_token,
        late_write,
        accepted: storage.accepted(),
    })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::var("LOCKSMITH_URL").unwrap_or_else(|_| "mem://".to_owned());
    println!("backend: {url}");
    let report = paused_holder(&url, "fencing/example", Duration::from_secs(1)).await?;
    println!("storage accepted: {:?}", report.accepted);
    Ok(())
}
