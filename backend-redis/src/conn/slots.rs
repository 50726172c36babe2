//! A Redis Cluster's slot map as the client knows it: which master serves which slots (`CLUSTER
//! SLOTS`), for the renewals that are grouped by master.
//!
//! The map is read the first time a caller needs it (the caller waits), then kept. A failure that
//! a moved slot or a failover causes marks it stale, and starts a refresh in the background at
//! once (at most one at a time, and one every [`RECHECK`]): a renewal never waits for the map
//! while a master hangs, and the map it uses meanwhile is right for every other master.
//!
//! A master whose renewal failed or went unanswered ([`Slots::suspect`]) may be one the cluster
//! is about to replace by its replica (after the cluster's node timeout, then an election). While
//! the map read still names it, the refresh asks again every [`RECHECK`]: so the renewal tried
//! next (a tenth of the TTL later) goes to the promoted replica, not to the hung master a second
//! time, which would take the rest of the lease's validity. A suspect is cleared when it answers
//! a renewal, when the map no longer names it, or [`SUSPECT_FOR`] after it was last suspected
//! (a master that hangs for good, never failed over, is not asked about for ever).
//!
//! The refresh task holds the map weakly: it ends once its client is gone.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{RedisError, RedisResult, Value};
use tokio::time::Instant;

/// The least time between two questions about the topology: to the sentinels, or for a
/// cluster's slot map.
pub(crate) const RECHECK: Duration = Duration::from_millis(200);

/// Slot ranges `(first, last, master host, master port)`, sorted.
pub(crate) type SlotOwners = Vec<(u16, u16, String, u16)>;

/// A node's address, `(host, port)`.
pub(crate) type NodeAddr = (String, u16);

/// How long a master stays suspected after its last failure: longer than a cluster takes to
/// promote a replica with the default node timeout (15 s), plus its election.
pub(crate) const SUSPECT_FOR: Duration = Duration::from_secs(30);

/// A cluster's slot map, shared by the link and its refresh.
#[derive(Default)]
pub(crate) struct Slots {
    map: RwLock<Option<SlotOwners>>,
    /// Marked by a failure that a moved slot or a failover causes; cleared by an answer that
    /// names no suspect.
    stale: AtomicBool,
    /// How many times the map was marked stale: an answer to a question asked before the last
    /// mark leaves it stale.
    marks: AtomicU64,
    /// Masters whose renewal failed, with when it last did (see [`Slots::suspect`]).
    suspects: Mutex<BTreeMap<NodeAddr, Instant>>,
    /// A refresh runs in the background (taken and given back under `last_refresh`'s lock).
    refreshing: AtomicBool,
    /// When the last question of a refresh began (or is due to).
    last_refresh: Mutex<Option<Instant>>,
    /// How many answers named other masters than the map before them (a failover, a
    /// resharding): the cluster connection is made afresh after each (see [`Slots::moves`]).
    moves: AtomicU64,
    /// Told of every move, for the requests that wait on a master ([`Slots::until_moved_away`]).
    moved: tokio::sync::Notify,
}

impl Slots {
    /// The map known, if it was ever read.
    pub(crate) fn known(&self) -> Option<SlotOwners> {
        self.map.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The master the map names for `slot`, if the map was ever read.
    pub(crate) fn owner_of(&self, slot: u16) -> Option<NodeAddr> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.as_ref()?
            .iter()
            .find(|(first, last, _, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, host, port)| (host.clone(), *port))
    }

    /// How many times a read of the map found other owners than the one before. The cluster
    /// connection's own map is read again only on a `MOVED` or a broken connection, not after a
    /// request to a master that hangs (cut off, paused) went unanswered, as this one is: a link
    /// whose connection was made before the last move makes a new one, which reads the map anew
    /// and sends to the replica promoted in the hung master's place (see `Link::conn`).
    pub(crate) fn moves(&self) -> u64 {
        self.moves.load(Ordering::SeqCst)
    }

    /// Ends once the map names another master than `owner` for `slot` (a failover promoted its
    /// replica): a request still waiting on `owner` then waits on a master that is not the
    /// slot's any more.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only waits.
    pub(crate) async fn until_moved_away(&self, slot: u16, owner: &NodeAddr) {
        loop {
            // Made before the check: a move told after it wakes this one.
            let moved = self.moved.notified();
            if self.owner_of(slot).is_some_and(|now| &now != owner) {
                return;
            }
            moved.await;
        }
    }

    /// The masters of the map known that are not suspected: where a new cluster connection
    /// should read its slot map (a suspect may hang, and a connection made afresh would wait out
    /// its timeout there).
    pub(crate) fn unsuspected_masters(&self) -> Vec<NodeAddr> {
        let Some(owners) = self.known() else {
            return Vec::new();
        };
        let suspects = self.suspects.lock().unwrap_or_else(|e| e.into_inner());
        masters_of(&owners)
            .into_iter()
            .filter(|node| !suspects.contains_key(node))
            .collect()
    }

    /// Whether the map should be read again.
    pub(crate) fn is_stale(&self) -> bool {
        self.stale.load(Ordering::SeqCst)
    }

    /// A failure that a moved slot or a failover causes: the map should be read again.
    pub(crate) fn mark_stale(&self) {
        self.marks.fetch_add(1, Ordering::SeqCst);
        self.stale.store(true, Ordering::SeqCst);
    }

    /// The marks so far: what a question asked now passes to [`Slots::keep`].
    pub(crate) fn marks(&self) -> u64 {
        self.marks.load(Ordering::SeqCst)
    }

    /// `node`'s renewal failed or went unanswered: the map is stale while it names `node` as a
    /// master, for at most [`SUSPECT_FOR`] from now.
    pub(crate) fn suspect(&self, node: &NodeAddr) {
        self.suspects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node.clone(), Instant::now());
        self.mark_stale();
    }

    /// `node` answered: it is no longer suspected.
    pub(crate) fn answered(&self, node: &NodeAddr) {
        let mut suspects = self.suspects.lock().unwrap_or_else(|e| e.into_inner());
        if !suspects.is_empty() {
            suspects.remove(node);
        }
    }

    /// Keeps `owners`, the answer to a question asked after `marks` marks ([`Slots::marks`]). The
    /// map is fresh unless it still names a suspect, or was marked stale since the question.
    pub(crate) fn keep(&self, owners: SlotOwners, marks: u64) {
        let masters = masters_of(&owners);
        let mut suspects = self.suspects.lock().unwrap_or_else(|e| e.into_inner());
        suspects.retain(|node, since| masters.contains(node) && since.elapsed() < SUSPECT_FOR);
        let suspect = !suspects.is_empty();
        let previous = self
            .map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace(owners.clone());
        if previous.is_some_and(|p| p != owners) {
            self.moves.fetch_add(1, Ordering::SeqCst);
            self.moved.notify_waiters();
        }
        self.stale.store(suspect, Ordering::SeqCst);
        // After the store: a mark that came before this check is seen here, one after it stores
        // `true` after this.
        if self.marks() != marks {
            self.stale.store(true, Ordering::SeqCst);
        }
    }

    /// Starts a refresh in the background over `conn` if the map is stale and none runs,
    /// asking the masters known (`seeds` before the first answer); its first question waits
    /// until [`RECHECK`] after the last one began. A refresh that runs asks again while the map
    /// is stale (a failure while it asks is not lost). Outside a runtime it does nothing: the
    /// next read of the map starts it.
    pub(crate) fn refresh(self: &Arc<Self>, conn: ClusterConnection, seeds: Vec<NodeAddr>) {
        if !self.is_stale() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(first) = self.begin_refresh() else {
            return;
        };
        let refreshing = Refreshing {
            slots: Arc::downgrade(self),
            ended: false,
        };
        runtime.spawn(refresh_while_stale(refreshing, first, conn, seeds));
    }

    /// Takes the refresh if none runs: when its first question is due ([`RECHECK`] after the
    /// last began, or now).
    fn begin_refresh(&self) -> Option<Instant> {
        let mut last = self.last_refresh.lock().unwrap_or_else(|e| e.into_inner());
        if self.refreshing.swap(true, Ordering::SeqCst) {
            return None;
        }
        let now = Instant::now();
        let first = last.map_or(now, |t| (t + RECHECK).max(now));
        *last = Some(first);
        Some(first)
    }

    /// Whether a refresh that began at `began` goes on: the map is still stale, and it has run
    /// less than [`SUSPECT_FOR`] (a cluster that answers nobody is not asked for ever; the next
    /// failure starts another). If not, the refresh has ended (under `last_refresh`'s lock, as
    /// [`Slots::begin_refresh`]: a failure marked after the check starts a refresh of its own).
    fn end_unless_stale(&self, began: Instant) -> bool {
        let mut last = self.last_refresh.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_stale() && began.elapsed() < SUSPECT_FOR {
            *last = Some(Instant::now() + RECHECK);
            return true;
        }
        self.refreshing.store(false, Ordering::SeqCst);
        false
    }
}

/// Reads the slot map at `first`, then every [`RECHECK`] while it is stale (a suspect still
/// named); ends when the map is fresh, or when its client is gone.
async fn refresh_while_stale(
    mut refreshing: Refreshing,
    first: Instant,
    conn: ClusterConnection,
    seeds: Vec<NodeAddr>,
) {
    tokio::time::sleep_until(first).await;
    let began = Instant::now();
    loop {
        let Some(slots) = refreshing.slots.upgrade() else {
            return;
        };
        let nodes = slots.known().map(|owners| masters_of(&owners)).unwrap_or_default();
        let nodes = if nodes.is_empty() { seeds.clone() } else { nodes };
        let marks = slots.marks();
        match ask_slots(conn.clone(), nodes).await {
            Ok(owners) => {
                tracing::debug!(masters = ?masters_of(&owners), "read the cluster's slots");
                slots.keep(owners, marks);
            }
            Err(e) => tracing::debug!(error = %e, "reading the cluster's slots failed"),
        }
        if !slots.end_unless_stale(began) {
            refreshing.ended = true;
            return;
        }
        drop(slots);
        tokio::time::sleep(RECHECK).await;
    }
}

/// Gives the refresh back however its task ends (made before the task is spawned and moved into
/// it: a runtime that shuts down drops it), unless it ended itself.
struct Refreshing {
    slots: Weak<Slots>,
    ended: bool,
}

impl Drop for Refreshing {
    fn drop(&mut self) {
        if let (false, Some(slots)) = (self.ended, self.slots.upgrade()) {
            slots.refreshing.store(false, Ordering::SeqCst);
        }
    }
}

/// The masters of a slot map, each once.
fn masters_of(owners: &SlotOwners) -> Vec<NodeAddr> {
    let mut nodes: Vec<NodeAddr> = owners.iter().map(|(_, _, host, port)| (host.clone(), *port)).collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

/// The slot map, asked of every node of `nodes` at once and taken from the first answer: a
/// master that hangs (paused, failing over) must hold up nothing.
pub(crate) async fn ask_slots(conn: ClusterConnection, nodes: Vec<NodeAddr>) -> RedisResult<SlotOwners> {
    if nodes.is_empty() {
        return Err(RedisError::from((
            redis::ErrorKind::Client,
            "no cluster node to ask for the slot map",
        )));
    }
    let asks = nodes.into_iter().map(|(host, port)| {
        let mut conn = conn.clone();
        Box::pin(async move {
            let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port,
            });
            let reply = conn
                .route_command(redis::cmd("CLUSTER").arg("SLOTS").clone(), to)
                .await?;
            Ok::<_, RedisError>((reply, host))
        })
    });
    let ((reply, asked), _) = futures_util::future::select_ok(asks).await?;
    parse_slots(reply, &asked)
}

/// Reads a `CLUSTER SLOTS` reply: `[[first, last, [host, port, id, …], replicas…], …]`, asked
/// of a node at `asked`. A master shown without a host (empty or null: "the node you asked") is
/// at `asked`; one shown at `?` (an unknown endpoint) is left out, and its slots' leases go on
/// their own, routed by key.
fn parse_slots(reply: Value, asked: &str) -> RedisResult<SlotOwners> {
    let bad = || RedisError::from((redis::ErrorKind::Parse, "unexpected CLUSTER SLOTS reply"));
    let Value::Array(ranges) = reply else { return Err(bad()) };
    let mut owners = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(parts) = range else { return Err(bad()) };
        let [first, last, master, ..] = parts.as_slice() else {
            return Err(bad());
        };
        let Value::Array(master) = master else {
            return Err(bad());
        };
        let [host, port, ..] = master.as_slice() else {
            return Err(bad());
        };
        let host: String = match host {
            Value::Nil => String::new(),
            host => redis::from_redis_value_ref(host)?,
        };
        let host = match host.as_str() {
            "?" => continue,
            "" => asked.to_owned(),
            _ => host,
        };
        owners.push((
            redis::from_redis_value_ref(first)?,
            redis::from_redis_value_ref(last)?,
            host,
            redis::from_redis_value_ref(port)?,
        ));
    }
    owners.sort_unstable();
    Ok(owners)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(masters: &[u16]) -> SlotOwners {
        masters
            .iter()
            .enumerate()
            .map(|(i, port)| (i as u16 * 100, i as u16 * 100 + 99, "127.0.0.1".to_owned(), *port))
            .collect()
    }

    #[test]
    fn the_map_stays_stale_while_it_names_a_suspect() {
        let slots = Slots::default();
        slots.keep(owners(&[7001, 7002]), slots.marks());
        assert!(!slots.is_stale());
        slots.suspect(&("127.0.0.1".to_owned(), 7001));
        assert!(slots.is_stale());
        // The cluster has not promoted its replica yet: the answer still names it.
        slots.keep(owners(&[7001, 7002]), slots.marks());
        assert!(slots.is_stale());
        // Promoted: the map no longer names it.
        slots.keep(owners(&[7004, 7002]), slots.marks());
        assert!(!slots.is_stale());
        // A suspect that answers again is no longer suspected.
        slots.suspect(&("127.0.0.1".to_owned(), 7002));
        slots.answered(&("127.0.0.1".to_owned(), 7002));
        slots.keep(owners(&[7004, 7002]), slots.marks());
        assert!(!slots.is_stale());
    }

    #[test]
    fn an_answer_to_a_question_asked_before_a_failure_leaves_the_map_stale() {
        let slots = Slots::default();
        let asked = slots.marks();
        slots.mark_stale();
        slots.keep(owners(&[7001, 7002]), asked);
        assert!(slots.is_stale());
        slots.keep(owners(&[7001, 7002]), slots.marks());
        assert!(!slots.is_stale());
    }

    #[test]
    fn cluster_slots_reply() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("127.0.0.1", 7002),
                node("127.0.0.1", 7005),
            ]),
            Value::Array(vec![Value::Int(0), Value::Int(5460), node("127.0.0.1", 7001)]),
        ]);
        assert_eq!(
            parse_slots(reply, "10.0.0.9").unwrap(),
            vec![
                (0, 5460, "127.0.0.1".to_owned(), 7001),
                (5461, 10922, "127.0.0.1".to_owned(), 7002)
            ]
        );
        assert!(parse_slots(Value::Int(1), "10.0.0.9").is_err());
        // A master without a host is the node asked; one at an unknown endpoint is left out.
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Int(0), Value::Int(10), node("", 7001)]),
            Value::Array(vec![
                Value::Int(11),
                Value::Int(20),
                Value::Array(vec![Value::Nil, Value::Int(7002)]),
            ]),
            Value::Array(vec![Value::Int(21), Value::Int(30), node("?", 7003)]),
        ]);
        assert_eq!(
            parse_slots(reply, "10.0.0.9").unwrap(),
            vec![
                (0, 10, "10.0.0.9".to_owned(), 7001),
                (11, 20, "10.0.0.9".to_owned(), 7002)
            ]
        );
    }
}
