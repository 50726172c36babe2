//! Looking at the servers and at this process from outside the lock: server-wide request
//! counters, and this process's memory.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::targets::Target;

/// Requests the (first) server of `target` has received so far, server-wide: etcd's
/// `grpc_server_msg_received_total`, ZooKeeper's `zk_packets_received`, the calls of the commands
/// Redis clients send (`INFO commandstats`), PostgreSQL's transactions that wrote (the next
/// transaction id: each step and each renewal writes, and this read takes one). `None` for
/// `mem://` and `file://`.
pub async fn requests(target: &Target) -> Result<Option<u64>> {
    if target.backend == "postgres" {
        // The URL without locksmith's options (tokio-postgres refuses unknown ones), at the
        // primary (a standby has no transaction ids to give).
        let base = target.url.split('?').next().unwrap_or(&target.url);
        let url = format!("{base}?target_session_attrs=read-write");
        let next: i64 = tokio::time::timeout(Duration::from_secs(5), async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
            let driver = tokio::spawn(connection);
            let row = client.query_one("SELECT txid_current()", &[]).await;
            drop(client);
            let _ = driver.await;
            row?.try_get::<_, i64>(0)
        })
        .await
        .context("reading PostgreSQL's transaction id: timed out")??;
        return Ok(Some(u64::try_from(next).unwrap_or(0)));
    }
    let Some(host) = target.hosts()?.into_iter().next() else {
        return Ok(None);
    };
    if target.backend == "redis" {
        // Commands sent by clients: a script's own calls (inside the server) are no requests, and
        // `total_commands_processed` would count them. locksmith's clients send FCALL (EVALSHA where
        // functions are refused), FUNCTION LOAD, SCRIPT, SUBSCRIBE, UNSUBSCRIBE and PING.
        let client = redis::Client::open(format!("redis://{host}/"))?;
        let info: String = tokio::time::timeout(Duration::from_secs(5), async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("INFO")
                .arg("commandstats")
                .query_async::<String>(&mut conn)
                .await
        })
        .await
        .context("reading Redis's INFO: timed out")??;
        let sent = [
            "fcall",
            "function|load",
            "evalsha",
            "eval",
            "script",
            "subscribe",
            "unsubscribe",
            "ping",
        ];
        let count = info
            .lines()
            .filter_map(|l| {
                let (cmd, stats) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats.strip_prefix("calls=")?.split(',').next()?.parse::<u64>().ok()?;
                sent.contains(&cmd).then_some(calls)
            })
            .sum();
        return Ok(Some(count));
    }
    let (request, parse): (String, fn(&str) -> Option<u64>) = match target.backend {
        "etcd" => (format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n"), |body| {
            Some(
                body.lines()
                    .filter(|l| l.starts_with("grpc_server_msg_received_total{"))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum::<f64>() as u64,
            )
        }),
        "zk" => ("mntr".into(), |body| {
            body.lines()
                .find_map(|l| l.strip_prefix("zk_packets_received")?.trim().parse().ok())
        }),
        _ => return Ok(None),
    };
    // Both close the connection after answering.
    let body = tokio::time::timeout(Duration::from_secs(5), async {
        let mut conn = TcpStream::connect(&host).await?;
        conn.write_all(request.as_bytes()).await?;
        let mut body = Vec::new();
        conn.read_to_end(&mut body).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&body).into_owned())
    })
    .await
    .context("reading a server counter: timed out")?
    .with_context(|| format!("reading a server counter at {host}"))?;
    parse(&body)
        .map(Some)
        .ok_or_else(|| anyhow!("no request counter in the answer of {host}"))
}

/// This process's resident memory, in MiB.
pub fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
        })
        .map_or(0.0, |kb| kb / 1024.0)
}
