//! etcd reference rows: the floor with the bare `etcd-client` crate, watch notification, etcd's
//! server-side lock RPC, and the single-key lock many hand-written etcd locks use (etcdsync's:
//! create the key if absent, otherwise watch it and try again when it is deleted), whose every
//! waiter wakes on each release (a thundering herd, measured by the `herd` workload).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, EventType, LockOptions, PutOptions, Txn, TxnOp, WatchOptions};

use super::{first_host, token, FloorTimes, Notification, Reference};
use crate::system::{Held, LockClient, LockSystem};

/// The lease every reference client holds and keeps alive (the same model as locksmith's: one
/// lease per connection, locks attached to it).
const LEASE_TTL_S: i64 = 30;

/// Sets up the etcd floor, notification floor and lock RPC peer.
pub async fn reference(url: &str) -> Result<Reference> {
    let endpoint = first_host(url, 2379)?;
    let mut client = Client::connect([endpoint.as_str()], None).await?;
    client.status().await?;
    let system = |mode| -> Arc<dyn LockSystem> {
        Arc::new(Etcd {
            endpoint: endpoint.clone(),
            mode,
        })
    };
    let single_key = system(Mode::SingleKey);
    let plain_write = PlainPut {
        kv: client.kv_client(),
        key: format!("lockbench/plain/{}", std::process::id()),
    };
    Ok(Reference {
        floor: Some(system(Mode::Floor)),
        notify: Some(Arc::new(WatchFloor { client })),
        peers: vec![system(Mode::LockRpc), single_key.clone()],
        herd: vec![single_key],
        single_attempt: Vec::new(),
        plain_write: Some(Arc::new(plain_write)),
    })
}

/// One `Put`: the `guarded` workload's floor.
struct PlainPut {
    kv: etcd_client::KvClient,
    key: String,
}

#[async_trait]
impl super::PlainWrite for PlainPut {
    async fn put(&self, value: &[u8]) -> Result<()> {
        self.kv.clone().put(self.key.as_str(), value, None).await?;
        Ok(())
    }
}

/// Which etcd lock a reference row runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The floor: one create-if-absent transaction, one delete; never waits.
    Floor,
    /// etcd's `Lock` RPC (the server runs the Go mutex: a predecessor watch).
    LockRpc,
    /// One key per lock; a waiter watches that key and tries again on its deletion (etcdsync).
    SingleKey,
}

struct Etcd {
    endpoint: String,
    mode: Mode,
}

struct EtcdClient {
    client: Client,
    lease: i64,
    mode: Mode,
    keepalive: tokio::task::JoinHandle<()>,
}

impl Drop for EtcdClient {
    fn drop(&mut self) {
        self.keepalive.abort();
    }
}

struct EtcdHeld {
    client: Client,
    key: Vec<u8>,
    mode: Mode,
}

#[async_trait]
impl LockSystem for Etcd {
    fn system(&self) -> &'static str {
        match self.mode {
            Mode::Floor => "floor",
            Mode::LockRpc => "etcd-lock-rpc",
            Mode::SingleKey => "single-key",
        }
    }
    fn backend(&self) -> &'static str {
        "etcd"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        let mut client = Client::connect([self.endpoint.as_str()], None).await?;
        let lease = client.lease_grant(LEASE_TTL_S, None).await?.id();
        let (mut keeper, mut responses) = client.lease_keep_alive(lease).await?;
        let keepalive = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs((LEASE_TTL_S / 3) as u64)).await;
                if keeper.keep_alive().await.is_err() || responses.message().await.is_err() {
                    return;
                }
            }
        });
        Ok(Arc::new(EtcdClient {
            client,
            lease,
            mode: self.mode,
            keepalive,
        }))
    }
}

#[async_trait]
impl LockClient for EtcdClient {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        let mut client = self.client.clone();
        let key = match self.mode {
            Mode::LockRpc => {
                let name = format!("lockbench-rpc/{name}");
                let resp = client
                    .lock(name, Some(LockOptions::new().with_lease(self.lease)))
                    .await?;
                resp.key().to_vec()
            }
            Mode::Floor => {
                let key = format!("lockbench-floor/{name}").into_bytes();
                if self.create(&mut client, &key).await?.is_some() {
                    bail!("floor: the key is held (the floor makes single attempts)");
                }
                key
            }
            Mode::SingleKey => {
                let key = format!("lockbench-single/{name}").into_bytes();
                while let Some(seen) = self.create(&mut client, &key).await? {
                    wait_deleted(&mut client, &key, seen).await?;
                }
                key
            }
        };
        Ok(Box::new(EtcdHeld {
            client,
            key,
            mode: self.mode,
        }))
    }
}

impl EtcdClient {
    /// Creates `key` with the lease if it does not exist: `None` when created, else the revision
    /// at which it was seen held.
    async fn create(&self, client: &mut Client, key: &[u8]) -> Result<Option<i64>> {
        let txn = Txn::new()
            .when([Compare::create_revision(key.to_vec(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.to_vec(),
                token(),
                Some(PutOptions::new().with_lease(self.lease)),
            )]);
        let resp = client.txn(txn).await?;
        if resp.succeeded() {
            return Ok(None);
        }
        let revision = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| anyhow!("no header"))?;
        Ok(Some(revision))
    }
}

/// Waits for the deletion of `key` after revision `seen` (etcdsync's wait: every waiter watches
/// the one key, so every release wakes them all).
async fn wait_deleted(client: &mut Client, key: &[u8], seen: i64) -> Result<()> {
    let options = WatchOptions::new().with_start_revision(seen + 1);
    let mut stream = client.watch(key.to_vec(), Some(options)).await?;
    while let Some(msg) = stream.message().await? {
        if msg.events().iter().any(|e| e.event_type() == EventType::Delete) {
            return Ok(());
        }
    }
    bail!("the watch stream closed")
}

#[async_trait]
impl Held for EtcdHeld {
    async fn release(mut self: Box<Self>) -> Result<()> {
        if self.mode == Mode::LockRpc {
            self.client.unlock(self.key).await?;
        } else {
            self.client.delete(self.key, None).await?;
        }
        Ok(())
    }
}

/// A watch on a key, armed when the "waiter" starts waiting; t0 = before the delete, notified =
/// the delete event received, taken = the waiter's create-if-absent transaction answered.
struct WatchFloor {
    client: Client,
}

#[async_trait]
impl Notification for WatchFloor {
    fn backend(&self) -> &'static str {
        "etcd"
    }
    async fn once(&self, blocked: Duration) -> Result<FloorTimes> {
        let mut client = self.client.clone();
        let key = format!("lockbench-floor/notify/{}", token());
        client.put(key.clone(), "held", None).await?;
        let mut stream = client.watch(key.clone(), None).await?;
        // The first response confirms the watch was created.
        let created = stream.message().await?.ok_or_else(|| anyhow!("watch stream closed"))?;
        if !created.created() {
            bail!("expected the watch-created response first");
        }
        tokio::time::sleep(blocked).await;
        let t0 = Instant::now();
        client.delete(key.clone(), None).await?;
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(10), stream.message())
                .await
                .map_err(|_| anyhow!("no watch event within 10 s"))??
                .ok_or_else(|| anyhow!("watch stream closed"))?;
            if !msg.events().is_empty() {
                let notified = t0.elapsed();
                let take = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key.clone(), "taken", None)]);
                let took = client.txn(take).await?.succeeded();
                let taken = t0.elapsed();
                client.delete(key, None).await?;
                if !took {
                    bail!("floor: the waiter's create-if-absent found the key still there");
                }
                return Ok(FloorTimes {
                    notified,
                    taken: Some(taken),
                });
            }
        }
    }
}
