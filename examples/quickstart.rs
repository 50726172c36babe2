//! Two workers contend for one lock; each prints when it holds it and with which fencing token.
//!
//! ```text
//! cargo run --example quickstart                      # embedded backend, no server needed
//! LOCKSMITH_URL=etcd://127.0.0.1:2379 cargo run --example quickstart --features etcd
//! ```

use std::time::Duration;

use locksmith::{LockError, Locker};

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::var("LOCKSMITH_URL").unwrap_or_else(|_| "mem://".to_owned());
    println!("backend: {url}");
    let workers = ["worker-a", "worker-b"].map(|who| tokio::spawn(work(url.clone(), who)));
    // Both workers run to their end (and shut their lockers down) before an error is returned.
    let mut result = Ok(());
    for worker in workers {
        result = result.and(worker.await.expect("worker panicked"));
    }
    result
}

/// One worker, as a separate process would be: its own connection, three turns at the lock.
async fn work(url: String, who: &'static str) -> Result<(), LockError> {
    let locker = locksmith::connect(&url).await?;
    let result = turns(&locker, who).await;
    // Before returning: releases what an early `?` dropped and ends the session, so the lock is
    // free at once rather than after its TTL.
    locker.shutdown().await?;
    result
}

/// Three turns at the lock.
async fn turns(locker: &Locker, who: &str) -> Result<(), LockError> {
    for turn in 1..=3 {
        let guard = locker
            .lock("quickstart/orders")
            .ttl(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .acquire()
            .await?;
        println!(
            "{who}: holds the lock (turn {turn}, fencing token {})",
            guard.fencing_token()
        );
        // The guarded work. A real job would pass the fencing token to the storage it writes to,
        // and stop if `guard.lost()` fires.
        tokio::time::sleep(Duration::from_millis(100)).await;
        guard.release().await?;
        println!("{who}: released");
        tokio::task::yield_now().await;
    }
    Ok(())
}
