//! etcd reference rows: the floor with the bare `etcd-client` crate, watch notification, and
//! etcd's server-side lock RPC.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, LockOptions, PutOptions, Txn, TxnOp};

use super::{first_host, token, Notification, Reference};
use crate::system::{Held, LockClient, LockSystem};

/// The lease every reference client holds and keeps alive (the same model as locksmith's: one
/// lease per connection, locks attached to it).
const LEASE_TTL_S: i64 = 30;

/// Sets up the etcd floor, notification floor and lock RPC peer.
pub async fn reference(url: &str) -> Result<Reference> {
    let endpoint = first_host(url, 2379)?;
    let mut client = Client::connect([endpoint.as_str()], None).await?;
    client.status().await?;
    Ok(Reference {
        floor: Some(Arc::new(Etcd {
            endpoint: endpoint.clone(),
            rpc: false,
        })),
        notify: Some(Arc::new(WatchFloor { client })),
        peers: vec![Arc::new(Etcd { endpoint, rpc: true })],
    })
}

/// The floor (`rpc: false`: create-if-absent txn + delete) or the lock RPC (`rpc: true`).
struct Etcd {
    endpoint: String,
    rpc: bool,
}

struct EtcdClient {
    client: Client,
    lease: i64,
    rpc: bool,
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
    rpc: bool,
}

#[async_trait]
impl LockSystem for Etcd {
    fn system(&self) -> &'static str {
        if self.rpc {
            "etcd-lock-rpc"
        } else {
            "floor"
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
            rpc: self.rpc,
            keepalive,
        }))
    }
}

#[async_trait]
impl LockClient for EtcdClient {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        let mut client = self.client.clone();
        if self.rpc {
            let name = format!("lockbench-rpc/{name}");
            let resp = client
                .lock(name, Some(LockOptions::new().with_lease(self.lease)))
                .await?;
            return Ok(Box::new(EtcdHeld {
                client,
                key: resp.key().to_vec(),
                rpc: true,
            }));
        }
        let key = format!("lockbench-floor/{name}").into_bytes();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                token(),
                Some(PutOptions::new().with_lease(self.lease)),
            )]);
        if !client.txn(txn).await?.succeeded() {
            bail!("floor: the key is held (the floor makes single attempts)");
        }
        Ok(Box::new(EtcdHeld {
            client,
            key,
            rpc: false,
        }))
    }
}

#[async_trait]
impl Held for EtcdHeld {
    async fn release(mut self: Box<Self>) -> Result<()> {
        if self.rpc {
            self.client.unlock(self.key).await?;
        } else {
            self.client.delete(self.key, None).await?;
        }
        Ok(())
    }
}

/// A watch on a key, armed when the "waiter" starts waiting; t0 = before the delete, t1 = the
/// delete event received.
struct WatchFloor {
    client: Client,
}

#[async_trait]
impl Notification for WatchFloor {
    fn backend(&self) -> &'static str {
        "etcd"
    }
    async fn once(&self, blocked: Duration) -> Result<Duration> {
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
        client.delete(key, None).await?;
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(10), stream.message())
                .await
                .map_err(|_| anyhow!("no watch event within 10 s"))??
                .ok_or_else(|| anyhow!("watch stream closed"))?;
            if !msg.events().is_empty() {
                return Ok(t0.elapsed());
            }
        }
    }
}
