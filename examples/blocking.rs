//! A synchronous program (no `async`, no tokio in its code) that takes locks through
//! `locksmith::blocking`: two threads contend for one lock, one runs work under it with `run`,
//! and a transfer takes two accounts' locks at once.
//!
//! ```sh
//! cargo run --example blocking --features blocking                                   # mem://
//! cargo run --example blocking --features blocking,redis -- redis://127.0.0.1:6379   # or file:///tmp/locks, ...
//! ```

use std::time::Duration;

fn main() -> Result<(), locksmith::LockError> {
    let url = std::env::args().nth(1).unwrap_or_else(|| "mem://".to_owned());
    demo(&url, "blocking-example")?;
    Ok(())
}

/// Everything above on the backend at `url`, with lock names under `prefix`; returns the fencing
/// token the work under `run` saw.
pub fn demo(url: &str, prefix: &str) -> Result<u64, locksmith::LockError> {
    let locker = locksmith::blocking::connect(url)?;
    let report = format!("{prefix}/report");

    // Two threads, one lock: they take turns.
    let workers: Vec<_> = (1..=2)
        .map(|worker| {
            let (locker, report) = (locker.clone(), report.clone());
            std::thread::spawn(move || -> Result<(), locksmith::LockError> {
                let guard = locker
                    .lock(&report)
                    .ttl(Duration::from_secs(2))
                    .timeout(Duration::from_secs(10))
                    .acquire()?;
                println!(
                    "worker {worker} holds the lock, fencing token {}",
                    guard.fencing_token()
                );
                // Busy for longer than half the TTL: the watchdog renews the lease meanwhile.
                std::thread::sleep(Duration::from_millis(1500));
                assert!(guard.is_held());
                println!("worker {worker} releases it");
                guard.release()?;
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker panicked")?;
    }

    // Work under the lock: acquired, run, released; its value, unless the lock was lost.
    let token = locker.lock(&report).timeout(Duration::from_secs(5)).run(|guard| {
        println!("running under the lock with token {}", guard.fencing_token());
        guard.fencing_token()
    })?;
    println!("run returned {token}");

    // Two accounts at once, in one global order, all or none.
    let both = locker
        .lock_all([format!("{prefix}/accounts/bob"), format!("{prefix}/accounts/alice")])
        .timeout(Duration::from_secs(5))
        .acquire()?;
    println!("holding {:?}", both.names());
    both.release()?;

    // Taking a lock this thread holds already is refused at once, not a self-deadlock.
    let held = locker.lock(&report).acquire()?;
    match locker.lock(&report).timeout(Duration::from_secs(30)).acquire() {
        Err(e @ locksmith::LockError::WouldDeadlock { .. }) => println!("refused at once: {e}"),
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
    drop(held); // releases before drop returns

    locker.shutdown()?;
    Ok(token)
}
