//! Uncontended latency: one `acquire` + `release` of a free lock in a loop, against the raw
//! floor of a bare etcd-client put-with-lease transaction + delete (2 round trips), and the
//! requests each cycle costs.
//!
//! `cargo run --release -p locksmith-etcd --example etcd_uncontended -- etcd://127.0.0.1:23790 [rounds]`

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use locksmith_core::driver::BackendUrl;
use tokio::time::Instant;

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let pct = |p: usize| samples[(samples.len() - 1) * p / 100];
    println!(
        "{what:<28} median {:>9.1?}  p90 {:>9.1?}  p99 {:>9.1?}",
        pct(50),
        pct(90),
        pct(99)
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "etcd://127.0.0.1:23790".into());
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(2000);
    let parsed = BackendUrl::parse(&url)?;
    let endpoints: Vec<String> = parsed.hosts.iter().map(|h| h.to_addr(2379)).collect();

    let mut raw = Client::connect(&endpoints, None).await?;
    let lease = raw.lease_grant(10, None).await?.id();
    let key = format!("bench/raw/{:x}", std::process::id());
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), "", Some(PutOptions::new().with_lease(lease)))]);
        raw.txn(txn).await?;
        raw.delete(key.as_str(), None).await?;
        samples.push(t.elapsed());
    }
    report("raw floor (txn + delete)", samples);

    let backend =
        std::sync::Arc::new(locksmith_etcd::EtcdBackend::connect(locksmith_etcd::Config::from_url(&parsed)?).await?);
    let locker = locksmith_core::Locker::from_arc(backend.clone());
    let name = format!("bench/uncontended/{:x}", std::process::id());
    let before = backend.stats();
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let g = locker.lock(&name).acquire().await?;
        g.release().await?;
        samples.push(t.elapsed());
    }
    let after = backend.stats();
    report("locksmith acquire + release", samples);
    // The backend alone, without the Locker (its watchdog registration and guard).
    use locksmith_core::driver::LockBackend;
    let req = locksmith_core::driver::LockRequest::mutex(
        locksmith_core::driver::LockName::new(&name)?,
        Duration::from_secs(10),
    );
    let mut bare = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let lease = backend.acquire(&req, None).await?;
        backend.release(&lease).await?;
        bare.push(t.elapsed());
    }
    report("backend acquire + release", bare);
    println!(
        "per cycle: {:.2} transactions, {:.2} keep-alives, {:.2} watch requests",
        (after.transactions - before.transactions) as f64 / rounds as f64,
        (after.keep_alives - before.keep_alives) as f64 / rounds as f64,
        (after.watch_requests - before.watch_requests) as f64 / rounds as f64,
    );
    Ok(())
}
