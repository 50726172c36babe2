//! Wake-ups pushed by the server: one pub/sub connection per server and backend, shared by all the
//! waiters of that backend, each listening on its own channel.
//!
//! A waiter subscribes *before* it joins the queue, so no wake-up can be published before it
//! listens. An election observer subscribes to the election's leader channel, which several
//! observers of one backend may share ([`Notifier::subscribe_shared`]): the channel stays
//! subscribed on the server while any of them listens. If the pub/sub connection breaks, every subscription ends (its receiver yields `None`)
//! and the waiter subscribes again on a new connection and re-checks the lock.
//!
//! The connection goes to the server of the [`Link`]: after a sentinel failover it is closed (so
//! every waiter subscribes again, on the new master); on a cluster it goes to the first seed node
//! that answers (a `PUBLISH` on any node reaches the subscribers of every node).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use locksmith_core::{LockError, Result};
use redis::aio::PubSubSink;
use tokio::sync::{mpsc, oneshot};

use crate::conn::link::Link;

/// The listeners of each channel, by subscription id.
type Senders = Arc<Mutex<HashMap<String, Vec<(u64, mpsc::UnboundedSender<Pushed>)>>>>;

/// What the server pushed on a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Something changed: look again (`wake`, or any message this version does not know).
    Wake,
    /// A release granted the lock to this waiter (`grant:<fencing token>:<deadline>`, see
    /// `lua/mutex/release.lua`): its fencing token, and the liveness deadline (server ms) of the
    /// step after which it was granted.
    Granted {
        /// The fencing token of the grant.
        fence: u64,
        /// The deadline the waiter's last step set, as the release read it.
        deadline: i64,
    },
}

impl Pushed {
    /// Reads a message's payload.
    fn parse(payload: &[u8]) -> Pushed {
        let granted = std::str::from_utf8(payload).ok().and_then(|p| {
            let (fence, deadline) = p.strip_prefix("grant:")?.split_once(':')?;
            Some(Pushed::Granted {
                fence: fence.parse().ok().filter(|f| *f > 0)?,
                deadline: deadline.parse().ok()?,
            })
        });
        granted.unwrap_or(Pushed::Wake)
    }
}

/// The id of the next subscription.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The pub/sub side of one server.
pub(crate) struct Notifier {
    link: Arc<Link>,
    addr: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// The live connection, with the sender whose drop stops its dispatcher (and so closes it).
    current: tokio::sync::Mutex<Option<(Conn, oneshot::Sender<()>)>>,
}

#[derive(Clone)]
struct Conn {
    sink: PubSubSink,
    senders: Senders,
    closed: Arc<std::sync::atomic::AtomicBool>,
    /// Held while a shared channel is subscribed or unsubscribed, so that the `UNSUBSCRIBE` of its
    /// last listener never overtakes the `SUBSCRIBE` of a new one.
    order: Arc<tokio::sync::Mutex<()>>,
}

/// One listener's channel. Unsubscribes (in the background) when dropped.
pub(crate) struct Subscription {
    channel: String,
    id: u64,
    /// Other listeners may share the channel (see [`Notifier::subscribe_shared`]).
    shared: bool,
    rx: mpsc::UnboundedReceiver<Pushed>,
    conn: Conn,
}

impl Notifier {
    pub(crate) fn new(link: Arc<Link>, addr: String, connect_timeout: Duration, response_timeout: Duration) -> Self {
        Notifier {
            link,
            addr,
            connect_timeout,
            response_timeout,
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// Subscribes to `channel`, which nobody else listens on (a waiter's own); returns once the
    /// server has confirmed the subscription.
    pub(crate) async fn subscribe(&self, channel: String) -> Result<Subscription> {
        let conn = self.connection().await?;
        self.listen(conn, channel, false).await
    }

    /// Subscribes to `channel`, which other listeners of this backend may share (an election's
    /// leader channel); returns once the server has confirmed the subscription.
    pub(crate) async fn subscribe_shared(&self, channel: String) -> Result<Subscription> {
        let conn = self.connection().await?;
        let order = conn.order.clone();
        let _order = order.lock().await;
        self.listen(conn, channel, true).await
    }

    async fn listen(&self, conn: Conn, channel: String, shared: bool) -> Result<Subscription> {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&conn.senders).entry(channel.clone()).or_default().push((id, tx));
        let sub = Subscription {
            channel: channel.clone(),
            id,
            shared,
            rx,
            conn: conn.clone(),
        };
        let mut sink = conn.sink.clone();
        match tokio::time::timeout(self.response_timeout, sink.subscribe(&channel)).await {
            Ok(Ok(())) => Ok(sub),
            // The user's ACL gives no right to the channel (Redis 7's default for a new user is
            // no channel at all): no later try can do better, and the connection is fine.
            Ok(Err(e)) if e.code() == Some("NOPERM") => Err(LockError::Denied(format!(
                "subscribing to {channel} on redis at {}: {} (waiting for a lock needs the \
                 user's ACL to allow its channels: `&*`, or those under the keys' prefix)",
                self.addr,
                e.detail().unwrap_or("no permission")
            ))),
            Ok(Err(e)) => {
                conn.closed.store(true, std::sync::atomic::Ordering::SeqCst);
                Err(LockError::unavailable(
                    format!("subscribing on redis at {}", self.addr),
                    e,
                ))
            }
            Err(_) => {
                // A connection that went silent: the next subscription opens a new one (and the
                // command connections are replaced too).
                conn.closed.store(true, std::sync::atomic::Ordering::SeqCst);
                Err(LockError::Unavailable {
                    message: format!(
                        "subscribing on redis at {}: no answer within {:?}",
                        self.addr, self.response_timeout
                    ),
                    source: None,
                })
            }
        }
    }

    /// The live pub/sub connection, opened (again) if there is none.
    async fn connection(&self) -> Result<Conn> {
        let mut current = self.current.lock().await;
        if let Some((conn, _)) = current.as_ref() {
            if !conn.closed.load(std::sync::atomic::Ordering::SeqCst) {
                return Ok(conn.clone());
            }
        }
        // Watched before the connection is opened: a master that moves while it opens (to the
        // old one) is then seen, and the connection dropped for one to the new.
        let mut moves = self.link.moves();
        let pubsub = self.open().await?;
        let (sink, mut stream) = pubsub.split();
        let conn = Conn {
            sink,
            senders: Senders::default(),
            closed: Default::default(),
            order: Default::default(),
        };
        let (senders, closed, addr) = (conn.senders.clone(), conn.closed.clone(), self.addr.clone());
        let (stop, mut stopped) = oneshot::channel::<()>();
        let mut probe = Probe::new(conn.sink.clone(), self.response_timeout);
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    msg = stream.next() => msg,
                    _ = &mut stopped => break, // the backend is gone: dropping the stream closes the connection
                    _ = moves.changed() => {
                        tracing::debug!(%addr, "the redis master moved; waiters will subscribe on the new one");
                        break;
                    }
                    answered = probe.due(!lock(&senders).is_empty()) => {
                        if answered {
                            continue;
                        }
                        tracing::debug!(%addr, "the redis pub/sub connection did not answer a PING; waiters will subscribe again");
                        break;
                    }
                };
                let Some(msg) = msg else {
                    tracing::debug!(%addr, "redis pub/sub connection closed; waiters will subscribe again");
                    break;
                };
                if let Some(listeners) = lock(&senders).get(msg.get_channel_name()) {
                    let pushed = Pushed::parse(msg.get_payload_bytes());
                    for (_, tx) in listeners {
                        let _ = tx.send(pushed);
                    }
                }
            }
            closed.store(true, std::sync::atomic::Ordering::SeqCst);
            lock(&senders).clear();
        });
        *current = Some((conn.clone(), stop));
        Ok(conn)
    }

    /// A new pub/sub connection to the first of the link's servers that answers.
    async fn open(&self) -> Result<redis::aio::PubSub> {
        let clients = self.link.pubsub_clients().await.map_err(|e| {
            self.link.failed(Some(&e));
            LockError::unavailable(format!("finding the redis server of {}", self.addr), e)
        })?;
        let mut last = None;
        for client in clients {
            let at = client.get_connection_info().addr().to_string();
            match tokio::time::timeout(self.connect_timeout, client.get_async_pubsub()).await {
                Ok(Ok(p)) => return Ok(p),
                Ok(Err(e)) => {
                    self.link.failed(Some(&e));
                    last = Some(LockError::unavailable(
                        format!("connecting to redis at {at} for pub/sub"),
                        e,
                    ));
                }
                Err(_) => {
                    self.link.failed(None);
                    last = Some(LockError::Unavailable {
                        message: format!(
                            "connecting to redis at {at} for pub/sub: timed out after {:?}",
                            self.connect_timeout
                        ),
                        source: None,
                    });
                }
            }
        }
        Err(last.unwrap_or_else(|| LockError::Unavailable {
            message: format!("no redis server to subscribe on for {}", self.addr),
            source: None,
        }))
    }
}

impl Subscription {
    /// Waits for the next message. `None` when the connection is gone (subscribe again).
    pub(crate) async fn recv(&mut self) -> Option<Pushed> {
        self.rx.recv().await
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let last = {
            let mut senders = lock(&self.conn.senders);
            let listeners = senders.entry(self.channel.clone()).or_default();
            listeners.retain(|(id, _)| *id != self.id);
            let last = listeners.is_empty();
            if last {
                senders.remove(&self.channel);
            }
            last
        };
        if !last || self.conn.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let (conn, shared) = (self.conn.clone(), self.shared);
        let channel = std::mem::take(&mut self.channel);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                // A waiter's own channel has no other listener: nothing to keep in order.
                let order = conn.order.clone();
                let _order = if shared { Some(order.lock().await) } else { None };
                // A listener that came meanwhile keeps a shared channel.
                if lock(&conn.senders).contains_key(&channel) {
                    return;
                }
                let mut sink = conn.sink.clone();
                let _ = tokio::time::timeout(Duration::from_secs(10), sink.unsubscribe(&channel)).await;
            });
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pub/sub connection's own check: a `PING` every response timeout while someone listens.
/// The connection only receives, so one that went silent without closing (a flow a NAT or
/// firewall dropped: an idle pub/sub flow is the likeliest to be) would otherwise leave its
/// waiters without their wake-ups until their heartbeat steps, and a new `SUBSCRIBE` would be
/// the first to notice. Unanswered within the response timeout, the connection is given up
/// and its waiters subscribe again on a new one.
struct Probe {
    sink: PubSubSink,
    every: Duration,
    next: tokio::time::Instant,
}

impl Probe {
    fn new(sink: PubSubSink, every: Duration) -> Probe {
        Probe {
            sink,
            every,
            next: tokio::time::Instant::now() + every,
        }
    }

    /// Waits until the next probe is due, sends it if `listening` (else only moves the time
    /// on), and says whether the connection answered within the response timeout.
    async fn due(&mut self, listening: bool) -> bool {
        tokio::time::sleep_until(self.next).await;
        self.next = tokio::time::Instant::now() + self.every;
        if !listening {
            return true;
        }
        let ping = self.sink.ping::<redis::Value>();
        matches!(tokio::time::timeout(self.every, ping).await, Ok(Ok(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::Pushed;

    #[test]
    fn a_grant_is_read_from_its_message_and_anything_else_wakes() {
        assert_eq!(
            Pushed::parse(b"grant:1764000000000123:1764000010000"),
            Pushed::Granted {
                fence: 1_764_000_000_000_123,
                deadline: 1_764_000_010_000
            }
        );
        for other in [&b"wake"[..], b"grant:", b"grant:0:5", b"grant:x:5", b"grant:5", b"\xff"] {
            assert_eq!(Pushed::parse(other), Pushed::Wake, "{other:?}");
        }
    }
}
