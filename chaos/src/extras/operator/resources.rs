//! The resource cases of the operator faults: each fills its server (or file system), checks an
//! acquire and a lock held before, and frees the server again, whatever happened.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use locksmith::Locker;
use tokio::io::AsyncWriteExt;

use super::{attempt, clear, held_through, OperatorFault};

pub(super) fn name(what: &str) -> String {
    format!("chaos/operator/{what}/{:08x}", rand::random::<u32>())
}

/// A row for a resource case, from the acquire's attempt and the held lock's fate.
pub(super) fn row(
    backend: &str,
    case: &str,
    expected: &str,
    got: super::Attempt,
    ok: bool,
    held: (String, bool),
) -> OperatorFault {
    OperatorFault {
        backend: backend.into(),
        case: case.into(),
        expected: expected.into(),
        outcome: got.outcome,
        message: got.message,
        ms: got.ms,
        held: Some(held.0),
        ok: ok && held.1,
    }
}

/// A row for a case that could not be set up.
pub(super) fn not_run(backend: &str, case: &str, why: String) -> OperatorFault {
    OperatorFault {
        backend: backend.into(),
        case: case.into(),
        expected: "to run".into(),
        outcome: "not run".into(),
        message: why,
        ms: 0.0,
        held: None,
        ok: false,
    }
}

pub(super) async fn connect(url: &str) -> Result<Locker, String> {
    locksmith::connect(url).await.map_err(|e| format!("connect: {e}"))
}

// --- etcd at its space quota -----------------------------------------------------------------

const ETCD_FILL: &str = "chaos-operator/fill/";

/// `etcdctl` against `endpoint` with `args` (and `stdin`): its output, or its error text.
async fn etcdctl(endpoint: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<String, String> {
    let mut child = tokio::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints=http://{endpoint}"))
        .args(["--dial-timeout=2s", "--command-timeout=10s"])
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("etcdctl: {e}"))?;
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(data).await.map_err(|e| format!("etcdctl stdin: {e}"))?;
    }
    let out = child.wait_with_output().await.map_err(|e| format!("etcdctl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Frees what the fill took and lifts the alarm, as an operator does.
async fn etcd_free(endpoint: &str) {
    let _ = etcdctl(endpoint, &["del", "--prefix", ETCD_FILL], None).await;
    if let Ok(status) = etcdctl(endpoint, &["endpoint", "status", "-w", "fields"], None).await {
        let revision = status
            .lines()
            .find_map(|l| l.strip_prefix("\"Revision\" : "))
            .map(|r| r.trim().to_owned());
        if let Some(r) = revision {
            let _ = etcdctl(endpoint, &["compact", &r], None).await;
        }
    }
    let _ = etcdctl(endpoint, &["defrag"], None).await;
    let _ = etcdctl(endpoint, &["alarm", "disarm"], None).await;
}

pub(super) async fn etcd_nospace(url: &str) -> OperatorFault {
    let (backend, case) = ("etcd", "space quota reached (NOSPACE alarm)");
    let endpoint = url.split_once("://").map_or(url, |(_, h)| h).to_owned();
    etcd_free(&endpoint).await;
    let url = format!("{url}?ttl=2s");
    let (a, b) = match (connect(&url).await, connect(&url).await) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return not_run(backend, case, e),
    };
    let held_name = name("nospace-held");
    let held = match a.lock(&held_name).acquire().await {
        Ok(g) => g,
        Err(e) => return not_run(backend, case, format!("acquire before the fill: {e}")),
    };
    let value = vec![b'x'; 512 * 1024];
    let mut full = false;
    for i in 0..200 {
        let key = format!("{ETCD_FILL}{i}");
        if let Err(e) = etcdctl(&endpoint, &["put", &key], Some(&value)).await {
            full = e.contains("space exceeded");
            break;
        }
    }
    if !full {
        etcd_free(&endpoint).await;
        return not_run(backend, case, "the fill did not reach the quota".into());
    }
    let fresh = name("nospace-new");
    let got = attempt(async move { b.lock(fresh).timeout(Duration::from_secs(20)).acquire().await.map(drop) }).await;
    let ok = got.outcome == "Denied" && got.ms < 5_000.0 && got.message.contains("NOSPACE");
    let fate = held_through(&held, &a, &held_name, Duration::from_secs(6)).await;
    let _ = held.release().await;
    etcd_free(&endpoint).await;
    row(
        backend,
        case,
        "Denied within 5 s naming NOSPACE; the held lock kept",
        got,
        ok,
        fate,
    )
}

// --- PostgreSQL at its connection limit ---------------------------------------------------------

pub(super) async fn postgres_connections(url: &str) -> OperatorFault {
    let (backend, case) = ("postgres", "connection limit reached (SQLSTATE 53300)");
    // A schema of its own: the role may create what it uses, and no other user must find the
    // default schema made by it.
    let with = format!("{url}?schema=chaos_connection_limit&ttl=1s&connect_timeout=2s");
    let a = match connect(&with).await {
        Ok(a) => a,
        Err(e) => return not_run(backend, case, e),
    };
    let held_name = name("connections-held");
    let held = match a.lock(&held_name).acquire().await {
        Ok(g) => g,
        Err(e) => return not_run(backend, case, format!("acquire: {e}")),
    };
    // Plain sessions of the same role until the server refuses one.
    let mut sessions = Vec::new();
    for _ in 0..10 {
        match tokio_postgres::connect(url, tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                sessions.push(client);
            }
            Err(_) => break,
        }
    }
    let got = attempt(async move { locksmith::connect(&with).await.map(drop) }).await;
    let ok = clear(&got, &["connection limit"]) && got.ms < 6_000.0;
    let fate = held_through(&held, &a, &held_name, Duration::from_secs(3)).await;
    drop(sessions);
    let _ = held.release().await;
    row(
        backend,
        case,
        "refused within the connect timeout naming the connection limit; the held lock kept",
        got,
        ok,
        fate,
    )
}

// --- Redis over its maxmemory with noeviction --------------------------------------------------

const REDIS_FILL: &str = "chaos-operator:fill:";

async fn redis_admin(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)?.get_multiplexed_async_connection().await
}

async fn used_memory(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(admin)
        .await
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

async fn set_maxmemory(admin: &mut redis::aio::MultiplexedConnection, bytes: u64) {
    let _: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes.to_string())
        .query_async(admin)
        .await;
}

pub(super) async fn redis_oom(url: &str) -> OperatorFault {
    let (backend, case) = ("redis", "maxmemory reached with noeviction (OOM)");
    let mut admin = match redis_admin(url).await {
        Ok(c) => c,
        Err(e) => return not_run(backend, case, format!("admin connection: {e}")),
    };
    let before: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query_async(&mut admin)
        .await
        .unwrap_or_default();
    let old_max = before.get(1).cloned().unwrap_or_else(|| "0".into());
    let with = format!("{url}?ttl=2s");
    let (a, b) = match (connect(&with).await, connect(&with).await) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return not_run(backend, case, e),
    };
    let held_name = name("oom-held");
    let held = match a.lock(&held_name).acquire().await {
        Ok(g) => g,
        Err(e) => return not_run(backend, case, format!("acquire before the fill: {e}")),
    };
    let used = used_memory(&mut admin).await;
    set_maxmemory(&mut admin, used + 2 * 1024 * 1024).await;
    let value = vec![b'x'; 64 * 1024];
    let mut filled = 0;
    for i in 0..200 {
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("{REDIS_FILL}{i}"))
            .arg(&value)
            .query_async(&mut admin)
            .await;
        filled = i + 1;
        if set.is_err() {
            break;
        }
    }
    // Kept full: once the refused value's buffer is freed the server is a little under its
    // maxmemory again and would take a small write; just under what it uses now, it takes none.
    let used = used_memory(&mut admin).await;
    set_maxmemory(&mut admin, used.saturating_sub(256 * 1024).max(1)).await;
    let fresh = name("oom-new");
    let got = attempt(async move { b.lock(fresh).timeout(Duration::from_secs(5)).acquire().await.map(drop) }).await;
    let ok = clear(&got, &["OOM"]) && got.ms < 10_000.0;
    let fate = held_through(&held, &a, &held_name, Duration::from_secs(6)).await;
    for i in 0..filled {
        let _: redis::RedisResult<()> = redis::cmd("DEL")
            .arg(format!("{REDIS_FILL}{i}"))
            .query_async(&mut admin)
            .await;
    }
    set_maxmemory(&mut admin, old_max.parse().unwrap_or(0)).await;
    let _ = held.release().await;
    row(
        backend,
        case,
        "a clear error naming OOM within the timeout; the held lock kept or its holder told",
        got,
        ok,
        fate,
    )
}

// --- file:// on a full file system ------------------------------------------------------------

/// A tmpfs of its own, unmounted on drop.
struct SmallFs(PathBuf);

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `None` where no tmpfs can be mounted (not root).
pub(super) async fn file_full_disk() -> Option<OperatorFault> {
    let (backend, case) = ("file", "file system full (a 512 KiB tmpfs)");
    let dir = std::env::temp_dir().join(format!("lockchaos-full-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).ok()?;
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k,mode=0755", "tmpfs"])
        .arg(&dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        let _ = std::fs::remove_dir(&dir);
        return None;
    }
    let fs = SmallFs(dir);
    let url = format!("file://{}/locks?ttl=1s", fs.0.display());
    let (a, b) = match (connect(&url).await, connect(&url).await) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return Some(not_run(backend, case, e)),
    };
    let held_name = name("full-held");
    let held = match a.lock(&held_name).acquire().await {
        Ok(g) => g,
        Err(e) => return Some(not_run(backend, case, format!("acquire: {e}"))),
    };
    {
        use std::io::Write;
        let mut f = std::fs::File::create(fs.0.join("filler")).ok()?;
        let chunk = vec![0u8; 4096];
        while f.write(&chunk).is_ok_and(|n| n > 0) {}
        while f.write(&[0]).is_ok_and(|n| n == 1) {}
    }
    let fresh = name("full-new");
    let got = attempt(async move { b.lock(fresh).timeout(Duration::from_secs(3)).acquire().await.map(drop) }).await;
    let ok = clear(&got, &["No space left"]) && got.ms < 6_000.0;
    let fate = held_through(&held, &a, &held_name, Duration::from_secs(3)).await;
    let _ = std::fs::remove_file(fs.0.join("filler"));
    let _ = held.release().await;
    Some(row(
        backend,
        case,
        "a clear error naming the full disk within the timeout; the held lock kept or its holder told",
        got,
        ok,
        fate,
    ))
}
