//! Redis reference rows: the floor with the bare `redis` crate, pub/sub notification, and `rslock`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use async_trait::async_trait;
use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubStream};
use redis::{AsyncCommands, Script};
use tokio::sync::Mutex;

use super::{first_host, token, FloorTimes, Notification, Reference};
use crate::system::{Held, LockClient, LockSystem};

const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// Sets up the Redis floor, notification floor and `rslock`.
pub async fn reference(url: &str) -> Result<Reference> {
    let plain = format!("redis://{}/", first_host(url, 6379)?);
    let client = redis::Client::open(plain.as_str())?;
    // Fail early (with the URL in the message) when the server is not there.
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("connecting to {plain}"))?;
    let _: String = redis::cmd("PING").query_async(&mut conn).await?;
    let plain_write = PlainSet {
        conn: conn.clone(),
        key: format!("lockbench:plain:{}", std::process::id()),
    };
    let notify = PubSubFloor::new(&client, conn).await?;
    Ok(Reference {
        floor: Some(Arc::new(Floor { client: client.clone() })),
        notify: Some(Arc::new(notify)),
        peers: vec![Arc::new(RsLock { url: plain })],
        herd: Vec::new(),
        single_attempt: Vec::new(),
        plain_write: Some(Arc::new(plain_write)),
    })
}

/// `SET key value`: the `guarded` workload's floor.
struct PlainSet {
    conn: MultiplexedConnection,
    key: String,
}

#[async_trait]
impl super::PlainWrite for PlainSet {
    async fn put(&self, value: &[u8]) -> Result<()> {
        let () = redis::cmd("SET")
            .arg(&self.key)
            .arg(value)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

/// `SET key token NX PX ttl`, then the compare-and-delete script.
struct Floor {
    client: redis::Client,
}

struct FloorClient {
    conn: MultiplexedConnection,
    release: Script,
}

struct FloorHeld {
    conn: MultiplexedConnection,
    release: Script,
    key: String,
    token: String,
}

#[async_trait]
impl LockSystem for Floor {
    fn system(&self) -> &'static str {
        "floor"
    }
    fn backend(&self) -> &'static str {
        "redis"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        let conn = self.client.get_multiplexed_async_connection().await?;
        Ok(Arc::new(FloorClient {
            conn,
            release: Script::new(RELEASE),
        }))
    }
}

#[async_trait]
impl LockClient for FloorClient {
    async fn acquire(&self, name: &str, ttl: Duration) -> Result<Box<dyn Held>> {
        let (key, token) = (format!("lockbench-floor:{name}"), token());
        let mut conn = self.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        if set.is_none() {
            bail!("floor: {key} is held (the floor makes single attempts)");
        }
        Ok(Box::new(FloorHeld {
            conn,
            release: self.release.clone(),
            key,
            token,
        }))
    }
}

#[async_trait]
impl Held for FloorHeld {
    async fn release(mut self: Box<Self>) -> Result<()> {
        let deleted: i64 = self
            .release
            .key(&self.key)
            .arg(&self.token)
            .invoke_async(&mut self.conn)
            .await?;
        if deleted != 1 {
            bail!("floor: {} was no longer ours", self.key);
        }
        Ok(())
    }
}

/// The handover floor: a lock key, a subscriber waiting on a channel with a connection of its
/// own to take the lock. t0 = before the release (`DEL` and `PUBLISH`, pipelined: one round
/// trip), notified = message received, taken = the subscriber's `SET NX PX` answered.
struct PubSubFloor {
    publisher: MultiplexedConnection,
    taker: MultiplexedConnection,
    channel: String,
    key: String,
    messages: Mutex<PubSubStream>,
}

impl PubSubFloor {
    async fn new(client: &redis::Client, publisher: MultiplexedConnection) -> Result<Self> {
        let channel = format!("lockbench-floor:{}", token());
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        Ok(PubSubFloor {
            publisher,
            taker: client.get_multiplexed_async_connection().await?,
            key: format!("lockbench-floor-handover:{}", token()),
            channel,
            messages: Mutex::new(pubsub.into_on_message()),
        })
    }
}

#[async_trait]
impl Notification for PubSubFloor {
    fn backend(&self) -> &'static str {
        "redis"
    }
    async fn once(&self, blocked: Duration) -> Result<FloorTimes> {
        let mut messages = self.messages.lock().await;
        let (mut publisher, mut taker) = (self.publisher.clone(), self.taker.clone());
        let () = publisher.set_ex(&self.key, "holder", 60).await?;
        tokio::time::sleep(blocked).await;
        let t0 = Instant::now();
        let release = async {
            let (_, receivers): (i64, i64) = redis::pipe()
                .del(&self.key)
                .publish(&self.channel, "released")
                .query_async(&mut publisher)
                .await?;
            anyhow::Ok(receivers)
        };
        let take = async {
            tokio::time::timeout(Duration::from_secs(10), messages.next())
                .await
                .map_err(|_| anyhow!("no pub/sub message within 10 s"))?
                .ok_or_else(|| anyhow!("the subscription ended"))?;
            let notified = t0.elapsed();
            let took: Option<String> = redis::cmd("SET")
                .arg(&self.key)
                .arg("waiter")
                .arg("NX")
                .arg("PX")
                .arg(60_000)
                .query_async(&mut taker)
                .await?;
            anyhow::Ok((notified, t0.elapsed(), took.is_some()))
        };
        let (receivers, (notified, taken, took)) = tokio::try_join!(release, take)?;
        if receivers < 1 {
            bail!("PUBLISH reached no subscriber");
        }
        if !took {
            bail!("floor: the waiter's SET NX found the key still held");
        }
        Ok(FloorTimes {
            notified,
            taken: Some(taken),
        })
    }
}

/// The `rslock` crate with its default retry policy (3 tries, up to 200 ms apart), looping
/// `acquire_no_guard` until it gets the lock, as its docs suggest.
struct RsLock {
    url: String,
}

struct RsLockClient {
    manager: rslock::LockManager,
}

struct RsLockHeld {
    manager: rslock::LockManager,
    lock: rslock::Lock,
}

#[async_trait]
impl LockSystem for RsLock {
    fn system(&self) -> &'static str {
        "rslock"
    }
    fn backend(&self) -> &'static str {
        "redis"
    }
    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        Ok(Arc::new(RsLockClient {
            manager: rslock::LockManager::new(vec![self.url.clone()]),
        }))
    }
}

#[async_trait]
impl LockClient for RsLockClient {
    async fn acquire(&self, name: &str, ttl: Duration) -> Result<Box<dyn Held>> {
        let resource = format!("lockbench-rslock:{name}");
        let lock = self
            .manager
            .acquire_no_guard(resource.as_bytes(), ttl)
            .await
            .map_err(|e| anyhow!("rslock: {e}"))?;
        Ok(Box::new(RsLockHeld {
            manager: self.manager.clone(),
            lock,
        }))
    }
}

#[async_trait]
impl Held for RsLockHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        self.manager.unlock(&self.lock).await;
        Ok(())
    }
}
