//! Measures the handover of the semaphore, the read-write lock and the election: the time from
//! the holder calling `release()` (a permit, a writer, a leader resigning) to the waiter's
//! `acquire()` returning (a permit, a reader, the next candidate), after short and long waits;
//! and how long an election observer takes to report the new leader.
//!
//! `cargo run -p locksmith-etcd --example primitive_handover -- etcd://127.0.0.1:23790 [rounds]`

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::{LeaderGuard, LockGuard, Locker, Result};
use tokio::time::Instant;

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let pct = |p: usize| samples[(samples.len() - 1) * p / 100];
    println!(
        "{what:<34} median {:>8.2?}  p90 {:>8.2?}  max {:>8.2?}",
        pct(50),
        pct(90),
        pct(100)
    );
}

/// A held lock of any kind, to let go of.
trait Held: Send + 'static {
    fn let_go(self) -> Pin<Box<dyn Future<Output = Result<()>> + Send>>;
}

impl Held for LockGuard {
    fn let_go(self) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(self.release())
    }
}

impl Held for LeaderGuard {
    fn let_go(self) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(self.resign())
    }
}

type Take<G> = fn(Locker, String) -> Pin<Box<dyn Future<Output = Result<G>> + Send>>;

/// The handover from `hold` on `a` to `wait` on `b`, after waits of `wait_for`.
async fn handover<G: Held, H: Held>(
    (a, hold): (&Locker, Take<G>),
    (b, wait): (&Locker, Take<H>),
    name: &str,
    rounds: usize,
    wait_for: Duration,
) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let held = hold(a.clone(), name.to_owned()).await?;
        let waiter = tokio::spawn({
            let next = wait(b.clone(), name.to_owned());
            async move {
                let g = next.await;
                (Instant::now(), g)
            }
        });
        tokio::time::sleep(Duration::from_millis(20) + wait_for).await;
        let released_at = Instant::now();
        held.let_go().await?;
        let (acquired_at, guard) = waiter.await.expect("waiter");
        samples.push(acquired_at - released_at);
        guard?.let_go().await?;
    }
    Ok(samples)
}

fn permit(l: Locker, n: String) -> Pin<Box<dyn Future<Output = Result<LockGuard>> + Send>> {
    Box::pin(async move { l.semaphore(n, 1).acquire().await })
}

fn write(l: Locker, n: String) -> Pin<Box<dyn Future<Output = Result<LockGuard>> + Send>> {
    Box::pin(async move { l.rwlock(n).write().acquire().await })
}

fn read(l: Locker, n: String) -> Pin<Box<dyn Future<Output = Result<LockGuard>> + Send>> {
    Box::pin(async move { l.rwlock(n).read().acquire().await })
}

fn lead(l: Locker, n: String) -> Pin<Box<dyn Future<Output = Result<LeaderGuard>> + Send>> {
    Box::pin(async move { l.election(n).campaign("candidate").acquire().await })
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "etcd://127.0.0.1:23790".into());
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(20);
    let url = BackendUrl::parse(&url)?;
    let (a, b, c) = (
        locksmith_etcd::connect(&url).await?,
        locksmith_etcd::connect(&url).await?,
        locksmith_etcd::connect(&url).await?,
    );
    let name = format!("bench/primitive_handover/{:x}", std::process::id());
    for wait in [Duration::ZERO, Duration::from_millis(600)] {
        let waited = wait + Duration::from_millis(20);
        let samples = handover((&a, permit), (&b, permit), &name, rounds, wait).await?;
        report(&format!("semaphore, waited {waited:?}"), samples);
        let samples = handover((&a, write), (&b, read), &name, rounds, wait).await?;
        report(&format!("writer -> reader, waited {waited:?}"), samples);
        let samples = handover((&a, read), (&b, write), &name, rounds, wait).await?;
        report(&format!("reader -> writer, waited {waited:?}"), samples);
        let samples = handover((&a, lead), (&b, lead), &name, rounds, wait).await?;
        report(&format!("election, waited {waited:?}"), samples);
    }
    // The observer: resign → the observer reports the next leader.
    let mut observed = c.election(&name).observe().await?;
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let lead = a.election(&name).campaign("first").acquire().await?;
        let next = tokio::spawn({
            let (b, name) = (b.clone(), name.clone());
            async move { b.election(name).campaign("second").acquire().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let resigned_at = Instant::now();
        lead.resign().await?;
        loop {
            if observed.changed().await?.is_some_and(|l| l.value == "second") {
                break;
            }
        }
        samples.push(resigned_at.elapsed());
        next.await.expect("candidate")?.resign().await?;
    }
    report("observer sees the next leader", samples);
    Ok(())
}
