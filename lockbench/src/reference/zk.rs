//! ZooKeeper reference rows: the floor with the bare `zookeeper-client` crate, exists-watch
//! notification, and the crate's built-in lock recipe.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use async_trait::async_trait;
use zookeeper_client::{Acls, Client, CreateMode, LockOptions, LockPrefix, OwnedLockClient};

use super::{first_host, token, FloorTimes, Notification, Reference};
use crate::system::{Held, LockClient, LockSystem};

const ROOT: &str = "/lockbench-ref";

/// Sets up the ZooKeeper floor, notification floor and lock recipe peer.
pub async fn reference(url: &str) -> Result<Reference> {
    let cluster = first_host(url, 2181)?;
    let client = Client::connect(&cluster).await?;
    let dir = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.mkdir(&format!("{ROOT}/notify"), &dir).await?;
    let plain_write = PlainSetData::new(client.clone()).await?;
    Ok(Reference {
        floor: Some(Arc::new(Zk {
            cluster: cluster.clone(),
            recipe: false,
        })),
        notify: Some(Arc::new(WatchFloor { client })),
        peers: vec![Arc::new(Zk { cluster, recipe: true })],
        herd: Vec::new(),
        single_attempt: Vec::new(),
        plain_write: Some(Arc::new(plain_write)),
    })
}

/// One `setData` of a node of its own: the `guarded` workload's floor.
struct PlainSetData {
    client: Client,
    path: String,
}

impl PlainSetData {
    async fn new(client: Client) -> Result<PlainSetData> {
        let path = format!("{ROOT}/plain-{}", std::process::id());
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        match client.create(&path, &[], &options).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(PlainSetData { client, path })
    }
}

#[async_trait]
impl super::PlainWrite for PlainSetData {
    async fn put(&self, value: &[u8]) -> Result<()> {
        self.client.set_data(&self.path, value, None).await?;
        Ok(())
    }
}

/// The floor (`recipe: false`) or the lock recipe (`recipe: true`).
struct Zk {
    cluster: String,
    recipe: bool,
}

struct ZkClient {
    client: Client,
    recipe: bool,
}

enum ZkHeld {
    /// The floor's node, deleted explicitly.
    Node { client: Client, path: String },
    /// The recipe's guard. Its release is dropping it, which *spawns* the delete of the lock node
    /// and returns before the server freed the lock; every other row's release returns once the
    /// server confirmed it. So that this row times the same work, its release deletes the node and
    /// waits for the answer, then forgets the guard (whose delete would find nothing and cost a
    /// request in the next cycle): one client handle leaked per cycle, nothing on the server.
    Recipe(OwnedLockClient),
}

#[async_trait]
impl LockSystem for Zk {
    fn system(&self) -> &'static str {
        if self.recipe {
            "zk-recipe"
        } else {
            "floor"
        }
    }
    fn backend(&self) -> &'static str {
        "zk"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        let client = Client::connect(&self.cluster).await?;
        Ok(Arc::new(ZkClient {
            client,
            recipe: self.recipe,
        }))
    }
}

#[async_trait]
impl LockClient for ZkClient {
    async fn acquire(&self, name: &str, _ttl: Duration) -> Result<Box<dyn Held>> {
        // Lock names contain '/', which ZooKeeper would take as path separators.
        let dir = format!("{ROOT}/{}", name.replace('/', "_"));
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        if self.recipe {
            let options = LockOptions::new(Acls::anyone_all()).with_ancestor_options(persistent)?;
            let lock = self
                .client
                .lock(LockPrefix::new_curator(&dir, "lock-")?, b"", options)
                .await?;
            return Ok(Box::new(ZkHeld::Recipe(lock.into_owned())));
        }
        let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let prefix = format!("{dir}/n-");
        let (_, seq) = match self.client.create(&prefix, b"", &ephemeral).await {
            Err(zookeeper_client::Error::NoNode) => {
                self.client.mkdir(&dir, &persistent).await?;
                self.client.create(&prefix, b"", &ephemeral).await?
            }
            other => other?,
        };
        let path = format!("{prefix}{seq}");
        let children = self.client.list_children(&dir).await?;
        let ours = path.rsplit('/').next().unwrap_or_default();
        if children.iter().any(|c| c.as_str() < ours) {
            self.client.delete(&path, None).await?;
            bail!("floor: the lock is held (the floor makes single attempts)");
        }
        Ok(Box::new(ZkHeld::Node {
            client: self.client.clone(),
            path,
        }))
    }
}

#[async_trait]
impl Held for ZkHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        match *self {
            ZkHeld::Node { client, path } => client.delete(&path, None).await?,
            ZkHeld::Recipe(lock) => {
                lock.delete(lock.lock_path(), None).await?;
                std::mem::forget(lock);
            }
        }
        Ok(())
    }
}

/// An exists-watch on a node, armed when the "waiter" starts waiting; t0 = before the delete,
/// notified = the watch event received, taken = the waiter's `create` of the node answered.
struct WatchFloor {
    client: Client,
}

#[async_trait]
impl Notification for WatchFloor {
    fn backend(&self) -> &'static str {
        "zk"
    }
    async fn once(&self, blocked: Duration) -> Result<FloorTimes> {
        let path = format!("{ROOT}/notify/n-{}", token());
        let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        self.client.create(&path, b"", &ephemeral).await?;
        let (stat, watcher) = self.client.check_and_watch_stat(&path).await?;
        if stat.is_none() {
            bail!("the node vanished before the watch was set");
        }
        tokio::time::sleep(blocked).await;
        let t0 = Instant::now();
        self.client.delete(&path, None).await?;
        tokio::time::timeout(Duration::from_secs(10), watcher.changed())
            .await
            .map_err(|_| anyhow!("no watch event within 10 s"))?;
        let notified = t0.elapsed();
        self.client.create(&path, b"", &ephemeral).await?;
        let taken = t0.elapsed();
        self.client.delete(&path, None).await?;
        Ok(FloorTimes {
            notified,
            taken: Some(taken),
        })
    }
}
