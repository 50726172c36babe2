//! A read-write lock: many readers of a shared configuration at once, or one writer.
//!
//! Readers hold the read side while they read; a writer that comes along waits for the readers
//! already in, and readers that come after it wait for it (writers are never starved). The
//! writer's fencing token is greater than every earlier reader's and writer's: the version it
//! stamps on what it writes.
//!
//! ```text
//! cargo run --example rwlock                          # embedded backend, no server needed
//! LOCKSMITH_URL=zk://127.0.0.1:2181 cargo run --example rwlock --features zk
//! ```

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith::LockError;

/// What a run saw.
#[derive(Debug, Default)]
pub struct Report {
    /// The most readers inside at once.
    pub most_readers: usize,
    /// Whether a reader ever found a writer inside, or a writer anyone else (must stay false).
    pub mixed: bool,
    /// The versions the writers stamped (their fencing tokens), in write order.
    pub versions: Vec<u64>,
}

/// `readers` readers read `rounds` times each, and one writer writes `rounds` times, all on the
/// read-write lock `name`.
pub async fn share_config(url: &str, name: &str, readers: usize, rounds: usize) -> Result<Report, LockError> {
    let inside_readers = Arc::new(AtomicUsize::new(0));
    let inside_writer = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mixed = Arc::new(AtomicUsize::new(0));
    let version = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..readers {
        let (url, name, r, w, most, mixed) = (
            url.to_owned(),
            name.to_owned(),
            inside_readers.clone(),
            inside_writer.clone(),
            most.clone(),
            mixed.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let locker = locksmith::connect(&url).await?;
            let config = locker.rwlock(&name);
            let reads = async {
                for _ in 0..rounds {
                    let read = config.read().timeout(Duration::from_secs(60)).acquire().await?;
                    let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    if w.load(Ordering::SeqCst) > 0 {
                        mixed.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await; // reading the configuration
                    r.fetch_sub(1, Ordering::SeqCst);
                    read.release().await?;
                }
                Ok::<Vec<u64>, LockError>(Vec::new())
            };
            let result = reads.await;
            // Before the reader ends: releases what an early `?` dropped and ends the session, so
            // the lock is free at once rather than after its TTL.
            locker.shutdown().await?;
            result
        }));
    }
    let (url, name, r, w, seen_mixed, version) = (
        url.to_owned(),
        name.to_owned(),
        inside_readers.clone(),
        inside_writer.clone(),
        mixed.clone(),
        version.clone(),
    );
    tasks.push(tokio::spawn(async move {
        let locker = locksmith::connect(&url).await?;
        let config = locker.rwlock(&name);
        let writes = async {
            let mut versions = Vec::new();
            for _ in 0..rounds {
                let write = config.write().timeout(Duration::from_secs(60)).acquire().await?;
                w.fetch_add(1, Ordering::SeqCst);
                if r.load(Ordering::SeqCst) > 0 {
                    seen_mixed.fetch_add(1, Ordering::SeqCst);
                }
                // Writing the configuration, stamped with the writer's fencing token: storage
                // that keeps the highest version it saw rejects a stale writer.
                version.fetch_max(write.fencing_token(), Ordering::SeqCst);
                versions.push(write.fencing_token());
                tokio::time::sleep(Duration::from_millis(10)).await;
                w.fetch_sub(1, Ordering::SeqCst);
                write.release().await?;
            }
            Ok(versions)
        };
        let result = writes.await;
        locker.shutdown().await?; // as the readers do
        result
    }));
    // Every task runs to its end (and shuts its locker down) before an error is returned.
    let mut report = Report::default();
    let mut result = Ok(());
    for task in tasks {
        let joined = task
            .await
            .map_err(|e| LockError::Protocol(format!("task panicked: {e}")));
        match joined.and_then(|task| task) {
            Ok(versions) => report.versions.extend(versions),
            Err(e) => result = result.and(Err(e)),
        }
    }
    result?;
    report.most_readers = most.load(Ordering::SeqCst);
    report.mixed = mixed.load(Ordering::SeqCst) > 0;
    Ok(report)
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::var("LOCKSMITH_URL").unwrap_or_else(|_| "mem://".to_owned());
    println!("backend: {url}");
    let report = share_config(&url, "examples/config", 4, 5).await?;
    println!(
        "up to {} readers at once; a writer never beside anyone: {}; versions written {:?}",
        report.most_readers, !report.mixed, report.versions
    );
    Ok(())
}
