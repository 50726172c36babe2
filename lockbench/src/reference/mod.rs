//! Reference rows measured in the same run, so every locksmith figure is a ratio taken side by
//! side: the **raw floor** (the minimal round trips of an acquire+release with the bare client
//! crate, and the bare notification latency) and the **peer libraries** on the same servers.
//!
//! | backend | floor: acquire+release | floor: handover (release → notification → take) | peer |
//! |---|---|---|---|
//! | redis | `SET NX PX` + compare-and-delete script | `DEL` + `PUBLISH` pipelined → pub/sub message → `SET NX PX` | `rslock` |
//! | etcd | create-if-absent txn (on a kept-alive lease) + delete | delete → watch event → create-if-absent txn | lock RPC (`etcd-client` `lock`/`unlock`) |
//! | zk | create ephemeral-sequential + get-children + delete | delete → exists-watch event → create | `zookeeper-client`'s lock recipe |
//! | file | open + `flock(LOCK_EX\|LOCK_NB)`, `flock(LOCK_UN)` + close | inotify event of a rename | `distributed-lock-file`, `fd-lock` |
//! | postgres | one prepared `INSERT … ON CONFLICT DO UPDATE … RETURNING token`, one `UPDATE` | LISTEN/NOTIFY | a session `pg_advisory_lock` |
//! | mysql | `SELECT GET_LOCK(?, 0)`, `SELECT RELEASE_LOCK(?)` | `RELEASE_LOCK` → the waiting `GET_LOCK` returns (the take) | `distributed-lock-mysql` |
//!
//! The handover floor on Redis, etcd and ZooKeeper is the `floor` row: the release, the
//! notification and the one request that takes the freed lock (what any queue-less waiter must do
//! after being told; locksmith's waiter makes the same request); the `floor-notify` row beside it is
//! the notification alone, from the same measurements. On file and PostgreSQL the `floor` row is
//! the notification alone; on MySQL the notification is the take (the waiting `GET_LOCK`).
//!
//! The `guarded` workload's floor is a plain write of the bare client ([`PlainWrite`]): Redis
//! `SET`, etcd `Put`, ZooKeeper `setData`, a PostgreSQL upsert.

#[cfg(feature = "etcd-ref")]
mod etcd;
#[cfg(feature = "file-ref")]
mod file;
#[cfg(feature = "mysql-ref")]
mod mysql;
#[cfg(feature = "postgres-ref")]
mod postgres;
#[cfg(feature = "postgres-ref")]
pub use postgres::statements_executed;
#[cfg(feature = "redis-ref")]
mod redis;
#[cfg(feature = "zk-ref")]
mod zk;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use async_trait::async_trait;

use crate::system::LockSystem;

/// The handover floor of a backend's client: the bare notification, and the minimal take after it.
#[async_trait]
pub trait Notification: Send + Sync {
    /// The backend measured.
    fn backend(&self) -> &'static str;
    /// One measurement: arm the notification, wait `blocked`, release at t0 (the one request
    /// that frees the lock and notifies), and say when the waiting side received the notification
    /// and, where the floor takes, when its one request that takes the freed lock was answered.
    async fn once(&self, blocked: Duration) -> Result<FloorTimes>;
}

/// One measurement of a handover floor, both times from the release (t0).
#[derive(Clone, Copy, Debug)]
pub struct FloorTimes {
    /// When the waiting side received the notification.
    pub notified: Duration,
    /// When its take (the one request that takes the freed lock: `SET NX PX`, a create-if-absent
    /// transaction, a `create`) was answered; `None` where the floor does not take (PostgreSQL,
    /// file: the notification alone).
    pub taken: Option<Duration>,
}

impl FloorTimes {
    /// A floor that measures the notification alone.
    pub fn notified(notified: Duration) -> FloorTimes {
        FloorTimes { notified, taken: None }
    }
}

/// A plain write of the bare client to a key of its own (the `guarded` workload's floor).
#[async_trait]
pub trait PlainWrite: Send + Sync {
    /// Writes `value` to the writer's key, with no check.
    async fn put(&self, value: &[u8]) -> Result<()>;
}

/// The reference systems of one backend.
#[derive(Default)]
pub struct Reference {
    /// The raw floor of acquire+release (single attempts, never waits).
    pub floor: Option<Arc<dyn LockSystem>>,
    /// The raw floor of a handover: the bare notification.
    pub notify: Option<Arc<dyn Notification>>,
    /// Peer libraries.
    pub peers: Vec<Arc<dyn LockSystem>>,
    /// Peers whose herd effect the `herd` workload measures beside locksmith's.
    pub herd: Vec<Arc<dyn LockSystem>>,
    /// Other floors that take a lock in one attempt and never wait (MySQL's `row-lease`): rows
    /// of the `uncontended` workload only.
    pub single_attempt: Vec<Arc<dyn LockSystem>>,
    /// The floor of the `guarded` workload: a plain write, no check.
    pub plain_write: Option<Arc<dyn PlainWrite>>,
}

/// Sets up the reference systems for `backend` at `url`. `Err` carries the note to report when
/// they are not built in (feature off) or cannot connect.
pub async fn for_backend(backend: &str, url: &str) -> Result<Reference, String> {
    let fut = async {
        match backend {
            #[cfg(feature = "redis-ref")]
            "redis" => redis::reference(url).await.map_err(|e| format!("{e:#}")),
            #[cfg(feature = "etcd-ref")]
            "etcd" => etcd::reference(url).await.map_err(|e| format!("{e:#}")),
            #[cfg(feature = "zk-ref")]
            "zk" => zk::reference(url).await.map_err(|e| format!("{e:#}")),
            #[cfg(feature = "file-ref")]
            "file" => file::reference(url).await.map_err(|e| format!("{e:#}")),
            #[cfg(feature = "postgres-ref")]
            "postgres" => postgres::reference(url).await.map_err(|e| format!("{e:#}")),
            #[cfg(feature = "mysql-ref")]
            "mysql" => mysql::reference(url).await.map_err(|e| format!("{e:#}")),
            "mem" => Err("the in-process backend has no server: no floor or peer rows".to_string()),
            other => {
                let _ = url;
                Err(format!(
                    "reference rows for {other} are not built in (build lockbench with the `{other}-ref` feature)"
                ))
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .unwrap_or_else(|_| Err("setting up timed out after 30 s".into()))
}

/// The first `host:port` of a locksmith URL, for the bare clients.
#[allow(dead_code)]
fn first_host(url: &str, default_port: u16) -> Result<String> {
    let parsed = locksmith::driver::BackendUrl::parse(url)?;
    parsed
        .hosts
        .first()
        .map(|h| h.to_addr(default_port))
        .ok_or_else(|| anyhow::anyhow!("{url} names no host"))
}

/// A token unique within this process run, for lock values.
#[allow(dead_code)]
fn token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}
