//! Shows the unsynced-watch pitfall this backend avoids: a watch created with a start revision
//! at or below the server's current revision is "unsynced", and a delete event that happens
//! before etcd's 100 ms sync loop picked the watcher up arrives late. A watch created without a
//! start revision is synced at once.
//!
//! `cargo run -p locksmith-etcd --example unsynced_watch -- 127.0.0.1:23790 [rounds]`

use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions};
use tokio::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args.next().unwrap_or_else(|| "127.0.0.1:23790".into());
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(20);
    let client = Client::connect([endpoint], None).await?;
    for (label, from_past) in [
        ("synced (no start revision)", false),
        ("unsynced (start revision in the past)", true),
    ] {
        let mut delays = Vec::new();
        for i in 0..rounds {
            let key = format!("bench/unsynced/{}/{i}", std::process::id());
            let created = client.kv_client().put(key.as_str(), "", None).await?;
            let rev = created.header().map_or(0, |h| h.revision());
            // Another write, so that rev + 1 is not in the future.
            client.kv_client().put(format!("{key}/other"), "", None).await?;
            let options = if from_past {
                WatchOptions::new().with_start_revision(rev + 1)
            } else {
                WatchOptions::new()
            };
            let mut stream = client.watch_client().watch(key.as_str(), Some(options)).await?;
            let _created = stream.message().await?; // the "created" response
            tokio::time::sleep(Duration::from_millis(5)).await;
            let deleted_at = Instant::now();
            client.kv_client().delete(key.as_str(), None).await?;
            loop {
                let resp = stream.message().await?.ok_or("watch ended")?;
                if resp.events().iter().any(|e| e.event_type() == EventType::Delete) {
                    delays.push(deleted_at.elapsed());
                    break;
                }
            }
            client.kv_client().delete(format!("{key}/other"), None).await?;
        }
        delays.sort();
        println!(
            "{label:>38}: delete → event median {:>8.2?}  p90 {:>8.2?}  max {:>8.2?}",
            delays[delays.len() / 2],
            delays[(delays.len() - 1) * 9 / 10],
            delays[delays.len() - 1]
        );
    }
    Ok(())
}
