//! Exporting locksmith's metrics to Prometheus.
//!
//! locksmith reports through the `metrics` crate's facade (see `docs/metrics.md` for every name,
//! unit and label); a program installs the recorder it wants. Here: the Prometheus exporter's
//! recorder, a few workers taking locks, and `/metrics` served as Prometheus text on
//! `METRICS_ADDR` (default 127.0.0.1:9464) for a scraper, until Ctrl-C. `--once` prints the text
//! after the workers' first rounds instead, and exits.
//!
//! ```text
//! cargo run --example prometheus                      # then: curl http://127.0.0.1:9464/metrics
//! cargo run --example prometheus -- --once
//! LOCKSMITH_URL=redis://127.0.0.1:6379 cargo run --example prometheus --features redis -- --once
//! ```

use std::time::Duration;

use locksmith::LockError;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Installs the Prometheus recorder as the process's recorder (once per process).
pub fn install() -> PrometheusHandle {
    PrometheusBuilder::new()
        .install_recorder()
        .expect("no other metrics recorder is installed")
}

/// A few rounds of locking on `url`: workers contend for one mutex (labelled by the part of its
/// name before the first `/`), and take permits of a semaphore.
pub async fn workload(url: &str, rounds: usize) -> Result<(), LockError> {
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            let locker = locksmith::connect(&url)
                .await?
                .with_name_label(|name| name.split('/').next().map(str::to_owned));
            let work = async {
                for _ in 0..rounds {
                    let guard = locker
                        .lock("reports/daily")
                        .ttl(Duration::from_secs(5))
                        .acquire()
                        .await?;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    guard.release().await?;
                    let permit = locker.semaphore("quota/api", 2).acquire().await?;
                    permit.release().await?;
                }
                Ok::<(), LockError>(())
            };
            let result = work.await;
            // Before the worker ends: releases what an early `?` dropped and ends the session, so
            // the locks are free at once rather than after their TTL.
            locker.shutdown().await?;
            result
        }));
    }
    // Every worker runs to its end (and shuts its locker down) before an error is returned.
    let mut result = Ok(());
    for task in tasks {
        let joined = task
            .await
            .map_err(|e| LockError::Protocol(format!("worker panicked: {e}")));
        result = result.and(joined.and_then(|worker| worker));
    }
    result
}

/// Serves `handle.render()` on every HTTP request to `addr` (a minimal HTTP/1.0 answer: enough
/// for a Prometheus scraper or curl).
async fn serve(addr: &str, handle: PrometheusHandle) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("serving metrics on http://{addr}/metrics");
    loop {
        let (mut socket, _) = listener.accept().await?;
        let body = handle.render();
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await;
            let head = format!(
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
        });
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("LOCKSMITH_URL").unwrap_or_else(|_| "mem://".to_owned());
    let handle = install();
    workload(&url, 5).await?;
    if std::env::args().any(|a| a == "--once") {
        print!("{}", handle.render());
        return Ok(());
    }
    let addr = std::env::var("METRICS_ADDR").unwrap_or_else(|_| "127.0.0.1:9464".to_owned());
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let background = tokio::spawn(async move {
        while !*stopped.borrow() {
            let _ = workload(&url, 5).await;
            tokio::select! {
                _ = stopped.changed() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    });
    let served = tokio::select! {
        served = serve(&addr, handle) => served,
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    // The workload round under way finishes (its workers shut their lockers down) rather than
    // being dropped with locks held.
    let _ = stop.send(true);
    background.await?;
    served?;
    Ok(())
}
