//! Measures the handover: the time from a holder calling `release()` to the waiter's `acquire()`
//! returning, after waits of different lengths. With synced predecessor watches it stays near one
//! notification + one round trip whatever the wait; an unsynced watch would add up to 100 ms.
//!
//! `cargo run -p locksmith-etcd --example handover -- etcd://127.0.0.1:23790 [rounds]`

use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use tokio::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "etcd://127.0.0.1:23790".into());
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(20);
    let url = BackendUrl::parse(&url)?;
    let (a, b) = (
        locksmith_etcd::connect(&url).await?,
        locksmith_etcd::connect(&url).await?,
    );
    let name = format!("bench/handover/{:x}", std::process::id());
    for wait in [
        Duration::ZERO,
        Duration::from_millis(20),
        Duration::from_millis(150),
        Duration::from_millis(600),
    ] {
        let mut samples = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let held = a.lock(&name).acquire().await?;
            let waiter = tokio::spawn({
                let (b, name) = (b.clone(), name.clone());
                async move {
                    let g = b.lock(&name).acquire().await;
                    (Instant::now(), g)
                }
            });
            // Let the waiter queue, then wait as long as asked.
            tokio::time::sleep(Duration::from_millis(20) + wait).await;
            let released_at = Instant::now();
            held.release().await?;
            let (acquired_at, guard) = waiter.await?;
            samples.push(acquired_at - released_at);
            guard?.release().await?;
        }
        samples.sort();
        let pct = |p: usize| samples[(samples.len() - 1) * p / 100];
        println!(
            "waited {:>6.0?}: handover median {:>8.2?}  p90 {:>8.2?}  max {:>8.2?}",
            wait + Duration::from_millis(20),
            pct(50),
            pct(90),
            pct(100)
        );
    }
    Ok(())
}
