//! How a [`crate::conn::node::Node`] reaches its server, in each topology:
//!
//! - **Fixed**: one server at one address (a single server, or one master of a quorum), over one
//!   auto-reconnecting multiplexed connection, replaced by a new one when a request on it got no
//!   answer in time (see [`Link::failed`]).
//! - **Sentinel**: the master that a set of sentinels names (`SENTINEL get-master-addr-by-name`,
//!   then `ROLE` on the server to check it is a master). When a request fails in a way a failover
//!   causes (the connection refused or dropped, no answer, `READONLY` from a master demoted to
//!   replica), the sentinels are asked again (at most every [`RECHECK`]), in the background: the
//!   requests meanwhile wait for the answer at most [`RECHECK`], then go to the master known, so
//!   that sentinels that do not answer hold up nothing. If they name another master, every
//!   request goes there from then on and [`Link::moves`] ticks, so that the pub/sub side moves
//!   too.
//! - **Cluster**: a Redis Cluster connection, which sends each request to the master of its key's
//!   slot and follows `MOVED`/`ASK` and resharding by itself; [`Link::slot_owners`] tells which
//!   node serves which slots, for the renewals that are grouped by node.
//!
//! With replica confirmation (`min_replicas`), the requests that must be confirmed go over a
//! second connection ([`Link::confirm_conn`]), because `WAIT` blocks the connection it is sent on
//! until the replicas answer, and confirms the writes made on that same connection only.
//!
//! Every connection closes with a reset ([`tcp_settings`]): a connection replaced because a request
//! on it went unanswered must not deliver that request later.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::io::tcp::TcpSettings;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Client, Cmd, ConnectionAddr, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::sync::{watch, OnceCell};
use tokio::time::Instant;

use crate::config::{escape, host_port, Config, Topology};
use crate::conn::slots::{ask_slots, NodeAddr, SlotOwners, Slots, RECHECK};
use crate::layout::slot_of;

/// A connection to send requests on, whatever the topology.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server's multiplexed connection.
    Server(ConnectionManager),
    /// A cluster connection.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Server(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Server(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Server(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// `WAIT replicas timeout` on the server that holds `key` (the connection's server, or on a
    /// cluster the master of `key`'s slot, over that node's connection): how many replicas
    /// acknowledged every write made so far on this connection.
    pub(crate) async fn wait_replicas(&mut self, key: &str, replicas: u32, timeout: Duration) -> RedisResult<i64> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas)
            .arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1));
        match self {
            Conn::Server(c) => wait.query_async(c).await,
            Conn::Cluster(c) => {
                let route = redis::cluster_routing::Route::new(slot_of(key), redis::cluster_routing::SlotAddr::Master);
                let value = c
                    .route_command(
                        wait,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?;
                Ok(redis::from_redis_value(value)?)
            }
        }
    }

    /// Sends `pipeline` to the cluster node at `host:port` (on a server connection: to its server).
    pub(crate) async fn pipeline_to(&mut self, pipeline: &Pipeline, node: &(String, u16)) -> RedisResult<Vec<Value>> {
        match self {
            Conn::Server(c) => pipeline.query_async(c).await,
            Conn::Cluster(c) => {
                let to = SingleNodeRoutingInfo::ByAddress {
                    host: node.0.clone(),
                    port: node.1,
                };
                c.route_pipeline(pipeline.clone(), 0, pipeline.len(), to).await
            }
        }
    }
}

/// The way to one logical server.
pub(crate) struct Link {
    way: Way,
    /// Ticks whenever the server behind the link changes (a sentinel failover).
    moved: watch::Sender<u64>,
}

enum Way {
    /// One server at a fixed address.
    Fixed(FixedLink),
    /// The master the sentinels name (shared with the question to the sentinels that runs in
    /// the background; behind a pointer, as the largest by far).
    Sentinel(Arc<SentinelLink>),
    /// A Redis Cluster.
    Cluster(ClusterLink),
}

/// One server's client and connections.
#[derive(Clone)]
struct Server {
    addr: String,
    client: Client,
    conn: ConnectionManager,
    /// For the requests that `WAIT` for replicas (made on first use).
    confirm: ConnectionManager,
    /// When these connections were made (see [`Server::fresh`]).
    made: Instant,
}

impl Server {
    fn new(addr: String, client: Client, manager: &ConnectionManagerConfig) -> RedisResult<Server> {
        Ok(Server {
            addr,
            conn: ConnectionManager::new_lazy_with_config(client.clone(), manager.clone())?,
            confirm: ConnectionManager::new_lazy_with_config(client.clone(), manager.clone())?,
            client,
            made: Instant::now(),
        })
    }

    /// New connections to the same server, in place of these when a request sent on them at
    /// `sent` got no answer: a connection that went silent without closing (a flow a NAT or
    /// firewall dropped) is never reconnected by the client, which only reconnects a connection
    /// that failed, and every later request would wait on it for its timeout. `None` when these
    /// were made after `sent`: the request went over connections already replaced (the requests
    /// in flight on a silent connection replace it once, not one after another).
    fn fresh(&self, manager: &ConnectionManagerConfig, sent: Instant) -> Option<Server> {
        if self.made > sent {
            return None;
        }
        tracing::debug!(addr = %self.addr, "a redis request got no answer; opening new connections");
        Server::new(self.addr.clone(), self.client.clone(), manager).ok()
    }
}

/// The fixed topology's state.
struct FixedLink {
    current: RwLock<Server>,
    manager: ConnectionManagerConfig,
}

impl FixedLink {
    /// The current connections (a read of a lock that is written only when they are replaced).
    fn server(&self) -> std::sync::RwLockReadGuard<'_, Server> {
        self.current.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sentinel topology's state.
struct SentinelLink {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    manager: ConnectionManagerConfig,
    /// How long one question to the sentinels may take.
    ask_timeout: Duration,
    current: RwLock<Option<Server>>,
    /// A request failed as a failover makes them fail: ask the sentinels again.
    stale: AtomicBool,
    /// When the question to the sentinels that runs in the background began (one at a time;
    /// `None`: none runs).
    asking_since: Mutex<Option<Instant>>,
    /// Whether the last question was answered: callers wait for a question's answer only then
    /// (sentinels that do not answer must cost a request nothing).
    answering: AtomicBool,
    /// Told when a question in the background ended.
    answered: tokio::sync::Notify,
    /// When the last question began or ended: the next is due [`RECHECK`] after it.
    last_asked: Mutex<Option<Instant>>,
}

/// Ends the question to the sentinels that began at `.1` however its task ends (made before the
/// task is spawned and moved into it: a runtime that shuts down before or while running it drops
/// it): the next failure may ask again, [`RECHECK`] from now, and callers waiting for it go on.
struct Asking(Arc<SentinelLink>, Instant);

impl Drop for Asking {
    fn drop(&mut self) {
        let link = &self.0;
        let mut since = link.asking_since.lock().unwrap_or_else(|e| e.into_inner());
        if *since == Some(self.1) {
            *since = None;
        }
        drop(since);
        *link.last_asked.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        link.answered.notify_waiters();
    }
}

/// The cluster topology's state.
struct ClusterLink {
    client: ClusterClient,
    conn: FreshConn,
    confirm: FreshConn,
    /// One client per seed node, for the pub/sub side (a message published on any node of a
    /// cluster reaches the subscribers of every node).
    seeds: Vec<Client>,
    /// Which master serves which slots (`CLUSTER SLOTS`), shared with its refresh.
    slots: Arc<Slots>,
    /// Connections of their own to single nodes (behind a pointer, as large).
    nodes: Box<NodeConns>,
}

/// Connections of their own to a cluster's single nodes, by address, for the requests sent to
/// one node (the grouped renewal): the cluster client holds up every request it carries while it
/// reads the slots again and checks its connections, which takes up to its timeouts while a node
/// hangs (a paused master), and would take a renewal on the promoted replica with it.
struct NodeConns {
    servers: Mutex<HashMap<NodeAddr, Server>>,
    /// What they are made from.
    config: Config,
    manager: ConnectionManagerConfig,
}

impl Link {
    /// The link of server `i` of `config` (connections are made on first use).
    pub(crate) fn new(config: &Config, i: usize, manager: ConnectionManagerConfig) -> RedisResult<Link> {
        let way = match &config.topology {
            Topology::Servers => {
                let client = client_for(config, &config.node_urls[i])?;
                Way::Fixed(FixedLink {
                    current: RwLock::new(Server::new(config.addrs[i].clone(), client, &manager)?),
                    manager,
                })
            }
            Topology::Sentinel { sentinels, master } => {
                let addrs: Vec<ConnectionAddr> = sentinels
                    .iter()
                    .map(|(host, port)| ConnectionAddr::Tcp(host.clone(), *port))
                    .collect();
                let mut builder = SentinelClientBuilder::new(addrs, master.clone(), SentinelServerType::Master)?
                    .set_client_to_redis_db(i64::from(config.db))
                    .set_client_to_redis_tcp_settings(tcp_settings(TcpSettings::default()));
                if let Some(user) = &config.user {
                    builder = builder.set_client_to_redis_username(user);
                }
                if let Some(password) = &config.password {
                    builder = builder.set_client_to_redis_password(password);
                }
                builder = with_sentinel_tls(builder, config)?;
                Way::Sentinel(Arc::new(SentinelLink {
                    sentinel: tokio::sync::Mutex::new(builder.build()?),
                    manager,
                    ask_timeout: config.connect_timeout + config.response_timeout,
                    current: RwLock::new(None),
                    stale: AtomicBool::new(false),
                    asking_since: Mutex::new(None),
                    answering: AtomicBool::new(true),
                    answered: tokio::sync::Notify::new(),
                    last_asked: Mutex::new(None),
                }))
            }
            Topology::Cluster { seeds } => {
                let urls = cluster_urls(config, seeds);
                let seeds = urls
                    .iter()
                    .map(|u| client_for(config, &with_auth(config, u)))
                    .collect::<RedisResult<Vec<_>>>()?;
                Way::Cluster(ClusterLink {
                    client: cluster_client(config, urls)?,
                    conn: FreshConn::default(),
                    confirm: FreshConn::default(),
                    seeds,
                    slots: Arc::default(),
                    nodes: Box::new(NodeConns {
                        servers: Mutex::new(HashMap::new()),
                        config: config.clone(),
                        manager,
                    }),
                })
            }
        };
        Ok(Link {
            way,
            moved: watch::Sender::new(0),
        })
    }

    /// The connection to send the next request on (for a sentinel link, to the current master:
    /// after a failure that asked for it, the one the sentinels name if they answer within
    /// [`RECHECK`], else the one known).
    pub(crate) async fn conn(&self) -> RedisResult<Conn> {
        match &self.way {
            Way::Fixed(f) => Ok(Conn::Server(f.server().conn.clone())),
            Way::Sentinel(s) => Ok(Conn::Server(Box::pin(s.master(&self.moved)).await?.conn)),
            Way::Cluster(c) => Ok(Conn::Cluster(Box::pin(c.connection(&c.conn)).await?)),
        }
    }

    /// The connection for requests whose writes are then confirmed with `WAIT`.
    pub(crate) async fn confirm_conn(&self) -> RedisResult<Conn> {
        match &self.way {
            Way::Fixed(f) => Ok(Conn::Server(f.server().confirm.clone())),
            Way::Sentinel(s) => Ok(Conn::Server(Box::pin(s.master(&self.moved)).await?.confirm)),
            Way::Cluster(c) => Ok(Conn::Cluster(Box::pin(c.connection(&c.confirm)).await?)),
        }
    }

    /// The clients the pub/sub side may connect to, in order of preference.
    pub(crate) async fn pubsub_clients(&self) -> RedisResult<Vec<Client>> {
        match &self.way {
            Way::Fixed(f) => Ok(vec![f.server().client.clone()]),
            Way::Sentinel(s) => Ok(vec![Box::pin(s.master(&self.moved)).await?.client]),
            Way::Cluster(c) => Ok(c.seeds.clone()),
        }
    }

    /// Ticks whenever the server behind the link changes: the pub/sub side then drops its
    /// connection to the old one.
    pub(crate) fn moves(&self) -> watch::Receiver<u64> {
        self.moved.subscribe()
    }

    /// The address to name in messages: the server's, the current master's, or the cluster's.
    pub(crate) fn describe(&self, fallback: &str) -> String {
        match &self.way {
            Way::Fixed(f) => f.server().addr.clone(),
            Way::Sentinel(s) => match s.current.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
                Some(m) => format!("{fallback} ({})", m.addr),
                None => fallback.to_owned(),
            },
            Way::Cluster(_) => fallback.to_owned(),
        }
    }

    /// A request on this link, sent at `sent`, got no answer in time (the caller's deadline or
    /// the client's response timeout): the server's connections are replaced
    /// ([`Server::fresh`]). The pub/sub connection probes itself (`crate::wake`).
    pub(crate) fn unanswered(&self, sent: Instant) {
        self.replace_silent(sent);
    }

    /// A request on this link failed with `e` (`None`: it got no answer in time, or a failover
    /// is suspected). After a failover the sentinels are asked again; on a cluster, the slot
    /// owners are read again.
    pub(crate) fn failed(&self, e: Option<&RedisError>) {
        let moved = e.is_none_or(|e| {
            e.is_io_error()
                || e.is_connection_refusal()
                || e.is_timeout()
                || e.is_connection_dropped()
                || matches!(
                    e.code(),
                    Some("READONLY" | "MASTERDOWN" | "MOVED" | "ASK" | "CLUSTERDOWN" | "TRYAGAIN")
                )
        });
        if !moved {
            return;
        }
        match &self.way {
            Way::Fixed(_) => {}
            Way::Sentinel(s) => s.stale.store(true, Ordering::SeqCst),
            Way::Cluster(c) => {
                c.slots.mark_stale();
                c.refresh_slots();
            }
        }
    }

    /// Replaces the server's connections after a request sent at `sent` got no answer (see
    /// [`Link::unanswered`]); a cluster's connection has a client of its own that finds its
    /// nodes again.
    fn replace_silent(&self, sent: Instant) {
        match &self.way {
            Way::Fixed(f) => {
                let mut current = f.current.write().unwrap_or_else(|e| e.into_inner());
                if let Some(fresh) = current.fresh(&f.manager, sent) {
                    *current = fresh;
                }
            }
            Way::Sentinel(s) => {
                let mut current = s.current.write().unwrap_or_else(|e| e.into_inner());
                if let Some(fresh) = current.as_ref().and_then(|m| m.fresh(&s.manager, sent)) {
                    *current = Some(fresh);
                }
            }
            Way::Cluster(_) => {}
        }
    }

    /// Whether this is a cluster link.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.way, Way::Cluster(_))
    }

    /// On a cluster, which master serves which slots: read the first time (the caller waits),
    /// then the map known, read again in the background after a failure marked it stale (see
    /// [`crate::conn::slots`]): a renewal must not wait for the map while a master hangs.
    pub(crate) async fn slot_owners(&self) -> RedisResult<SlotOwners> {
        let Way::Cluster(c) = &self.way else {
            return Ok(Vec::new());
        };
        let conn = c.connection(&c.conn).await?;
        let Some(owners) = c.slots.known() else {
            let marks = c.slots.marks();
            let owners = ask_slots(conn, c.seed_nodes()).await?;
            c.slots.keep(owners.clone(), marks);
            return Ok(owners);
        };
        c.refresh_slots();
        Ok(owners)
    }

    /// On a cluster, the master `node` failed a renewal or did not answer it in time: the slot map
    /// is read again at once, and again while it names `node` (the cluster may be promoting its
    /// replica; see [`crate::conn::slots`]).
    pub(crate) fn suspect(&self, node: &NodeAddr) {
        if let Way::Cluster(c) = &self.way {
            self.forget_conns(node);
            c.slots.suspect(node);
            c.refresh_slots();
        }
    }

    /// On a cluster, a future that ends once the slot map names another master for `key`'s slot
    /// than it does now (a failover promoted the replica of a master that hangs): a request sent
    /// now and still waiting then is given up, and sent again to the promoted master, instead
    /// of waiting out its response timeout on the old one. `None` elsewhere, or while the map is
    /// not known.
    pub(crate) fn slot_moved(&self, key: &str) -> Option<impl std::future::Future<Output = ()> + '_> {
        let Way::Cluster(c) = &self.way else {
            return None;
        };
        let slot = slot_of(key);
        let owner = c.slots.owner_of(slot)?;
        Some(async move { c.slots.until_moved_away(slot, &owner).await })
    }

    /// On a cluster, a request on `key` went unanswered: the master the slot map names for it is
    /// suspected ([`Link::suspect`]), so that the map is read again until it names the replica
    /// the cluster promotes in its place, and new requests go there ([`Slots::moves`]).
    pub(crate) fn unanswered_on(&self, key: &str) {
        if let Way::Cluster(c) = &self.way {
            if let Some(node) = c.slots.owner_of(slot_of(key)) {
                self.suspect(&node);
            }
        }
    }

    /// On a cluster, the connections of its own to `node` ([`Link::node_conn`]) failed: they are
    /// made again on next use (as [`Link::unanswered`] replaces a server's elsewhere).
    pub(crate) fn forget_conns(&self, node: &NodeAddr) {
        if let Way::Cluster(c) = &self.way {
            c.nodes.servers.lock().unwrap_or_else(|e| e.into_inner()).remove(node);
        }
    }

    /// The connection to the single node `node` of a cluster (for requests whose writes are
    /// then confirmed with `WAIT`: `confirm`), apart from the cluster client's (see
    /// [`NodeConns`]); elsewhere [`Link::conn`] or [`Link::confirm_conn`].
    pub(crate) async fn node_conn(&self, node: &NodeAddr, confirm: bool) -> RedisResult<Conn> {
        let Way::Cluster(c) = &self.way else {
            return if confirm {
                self.confirm_conn().await
            } else {
                self.conn().await
            };
        };
        let NodeConns {
            servers,
            config,
            manager,
        } = &*c.nodes;
        let mut servers = servers.lock().unwrap_or_else(|e| e.into_inner());
        let server = match servers.get(node) {
            Some(server) => server,
            None => {
                // Nodes that no longer serve slots (removed, moved) are not kept.
                if let Some(owners) = c.slots.known() {
                    servers.retain(|addr, _| owners.iter().any(|(_, _, h, p)| (h, *p) == (&addr.0, addr.1)));
                }
                let scheme = if config.tls.is_some() { "rediss" } else { "redis" };
                let addr = host_port(&node.0, node.1);
                let client = client_for(config, &with_auth(config, &format!("{scheme}://{addr}")))?;
                servers
                    .entry(node.clone())
                    .or_insert(Server::new(addr, client, manager)?)
            }
        };
        Ok(Conn::Server(if confirm {
            server.confirm.clone()
        } else {
            server.conn.clone()
        }))
    }

    /// On a cluster, the master `node` answered a request.
    pub(crate) fn answered(&self, node: &NodeAddr) {
        if let Way::Cluster(c) = &self.way {
            c.slots.answered(node);
        }
    }
}

impl SentinelLink {
    /// The current master. Without one yet, the sentinels are asked, and the caller waits for
    /// their answer. With one, a failure that asked for a new question (and a last question
    /// begun or ended at least [`RECHECK`] ago) starts it in the background, one at a time. While
    /// a question runs, a caller waits for its answer until [`RECHECK`] after the question began
    /// (not after the caller came), and only if the last question was answered; then it goes on
    /// with the master known. So sentinels that answer at once still send the request after a
    /// failover to the new master, and sentinels that answer slowly or not at all (cut off,
    /// paused) hold up requests to a master that answers by no more than that, once.
    async fn master(self: &Arc<Self>, moved: &watch::Sender<u64>) -> RedisResult<Server> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(known) = current else {
            return self.ask(moved).await;
        };
        let answered = self.answered.notified();
        tokio::pin!(answered);
        answered.as_mut().enable();
        let asking_since = {
            let mut since = self.asking_since.lock().unwrap_or_else(|e| e.into_inner());
            // A question that outlived its timeout is not being run (its runtime stopped
            // driving it): another may begin.
            if since.is_some_and(|t| t.elapsed() > self.ask_timeout + RECHECK) {
                *since = None;
            }
            let due = {
                let last = self.last_asked.lock().unwrap_or_else(|e| e.into_inner());
                last.is_none_or(|t| t.elapsed() >= RECHECK)
            };
            if since.is_none() && due && self.stale.load(Ordering::SeqCst) {
                let began = Instant::now();
                *since = Some(began);
                let (asking, moved) = (Asking(self.clone(), began), moved.clone());
                tokio::spawn(async move {
                    let link = &asking.0;
                    let answered = link.ask(&moved).await;
                    if let Err(e) = &answered {
                        tracing::debug!(error = %e, "the redis sentinels do not answer; keeping the last master");
                    }
                    link.answering.store(answered.is_ok(), Ordering::SeqCst);
                });
            }
            *since
        };
        if let Some(began) = asking_since.filter(|_| self.answering.load(Ordering::SeqCst)) {
            let _ = tokio::time::timeout_at(began + RECHECK, answered).await;
        }
        let current = self.current.read().unwrap_or_else(|e| e.into_inner()).clone();
        Ok(current.unwrap_or(known))
    }

    /// Asks the sentinels which server is the master now; switches to it if it moved.
    async fn ask(&self, moved: &watch::Sender<u64>) -> RedisResult<Server> {
        let mut sentinel = self.sentinel.lock().await;
        *self.last_asked.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let client = match tokio::time::timeout(self.ask_timeout, sentinel.async_get_client()).await {
            Ok(client) => client?,
            Err(_) => {
                return Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the sentinels named no master within {:?}", self.ask_timeout),
                )))
            }
        };
        self.stale.store(false, Ordering::SeqCst);
        let addr = client.get_connection_info().addr().to_string();
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        if let Some(master) = current.as_ref().filter(|m| m.addr == addr) {
            return Ok(master.clone());
        }
        let moves = current.is_some();
        if moves {
            tracing::warn!(master = %addr, "the sentinels name a new redis master: following the failover");
        }
        let master = Server::new(addr, client, &self.manager)?;
        *current = Some(master.clone());
        if moves {
            // The first master found is no move: connections opened meanwhile went to it.
            moved.send_modify(|n| *n += 1);
        }
        Ok(master)
    }
}

impl ClusterLink {
    /// The seed nodes' addresses, where the first slot map is asked.
    fn seed_nodes(&self) -> Vec<(String, u16)> {
        self.seeds
            .iter()
            .filter_map(|seed| match seed.get_connection_info().addr() {
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    Some((host.clone(), *port))
                }
                _ => None,
            })
            .collect()
    }

    /// Reads the slot map again in the background if it is stale (over the connection made by
    /// the first request: before it, nothing has failed).
    fn refresh_slots(&self) {
        if !self.slots.is_stale() {
            return; // (every renewal asks: no seed list made for nothing)
        }
        if let Some(conn) = self.conn.made() {
            self.slots.refresh(conn, self.seed_nodes());
        }
    }

    /// The cluster connection of `fresh`, made (again) if none was made since the slot map last
    /// named other masters ([`Slots::moves`]). One made after a move starts from the masters of
    /// the map that are not suspected, not from the seeds: the cluster client connects to every
    /// node it starts from, and one that hangs (the master a failover replaced, paused or cut
    /// off, which may be a seed) would hold the new connection up for the whole connect timeout.
    async fn connection(&self, fresh: &FreshConn) -> RedisResult<ClusterConnection> {
        let moves = self.slots.moves();
        let cell = fresh.since(moves);
        Ok(cell
            .get_or_try_init(|| async {
                if moves == 0 {
                    return self.client.get_async_connection().await;
                }
                let nodes = self.slots.unsuspected_masters();
                if nodes.is_empty() {
                    return self.client.get_async_connection().await;
                }
                let config = &self.nodes.config;
                cluster_client(config, cluster_urls(config, &nodes))?
                    .get_async_connection()
                    .await
            })
            .await?
            .clone())
    }
}

/// A cluster connection, made once per move of the slot map (see [`Slots::moves`]): requests in
/// flight keep the connection they were sent on, new ones get the one made after the last move.
#[derive(Default)]
struct FreshConn(Mutex<(u64, Arc<OnceCell<ClusterConnection>>)>);

impl FreshConn {
    /// The cell of the connection for the map after `moves` moves (a new, empty one if the one
    /// kept is older).
    fn since(&self, moves: u64) -> Arc<OnceCell<ClusterConnection>> {
        let mut current = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if current.0 != moves {
            *current = (moves, Arc::new(OnceCell::new()));
        }
        current.1.clone()
    }

    /// The connection made last, if any.
    fn made(&self) -> Option<ClusterConnection> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).1.get().cloned()
    }
}

/// The `redis://` (or `rediss://`) URLs of cluster `nodes`.
fn cluster_urls(config: &Config, nodes: &[NodeAddr]) -> Vec<String> {
    let scheme = if config.tls.is_some() { "rediss" } else { "redis" };
    nodes
        .iter()
        .map(|(h, p)| format!("{scheme}://{}", host_port(h, *p)))
        .collect()
}

/// A cluster client that starts from the nodes of `urls` (it reads the slot map there, then
/// connects to the masters the map names).
fn cluster_client(config: &Config, urls: Vec<String>) -> RedisResult<ClusterClient> {
    let mut builder = ClusterClientBuilder::new(urls)
        .tcp_settings(tcp_settings(TcpSettings::default()))
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.response_timeout);
    if let Some(user) = &config.user {
        builder = builder.username(user.clone());
    }
    if let Some(password) = &config.password {
        builder = builder.password(password.clone());
    }
    with_cluster_tls(builder, config).build()
}

/// `settings` with what every connection to a Redis server needs: `SO_LINGER` 0, so that closing
/// it resets it and drops what it has not delivered, rather than sending that on after the close.
/// A connection is replaced when a request on it got no answer in time ([`Link::unanswered`]),
/// and closed once the last request on it ends; a request still in the network then (a waiter's
/// queue step cut off by a partition) would otherwise reach the server once the network heals,
/// after the clean-up that the caller sent over the new connection (the `LEAVE` of a waiter that
/// gave up), and queue the gone waiter again, to be granted a lock that nobody uses. (A Redis
/// Cluster connection is not replaced that way: the cluster client closes its own.) The price: a
/// request not yet sent on when its process exits (a clean-up whose wait ran out, on a network
/// that held it up) is dropped rather than delivered late; its entry then expires with its TTL.
fn tcp_settings(settings: TcpSettings) -> TcpSettings {
    settings.set_linger_time(Duration::ZERO)
}

/// A client for `url` (a `redis[s]://user:pass@host:port/db` URL), with the URL's TLS files.
fn client_for(config: &Config, url: &str) -> RedisResult<Client> {
    let info = url.into_connection_info()?;
    let settings = tcp_settings(info.tcp_settings().clone());
    let info = info.set_tcp_settings(settings);
    match &config.tls {
        None => Client::open(info),
        #[cfg(feature = "tls")]
        Some(tls) => {
            locksmith_core::driver::tls::install_provider();
            Client::build_with_tls(info, certificates(tls))
        }
        #[cfg(not(feature = "tls"))]
        Some(_) => Err(needs_tls()),
    }
}

/// `url` (`scheme://host:port`) with the config's credentials.
fn with_auth(config: &Config, url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match (&config.user, &config.password) {
        (None, None) => url.to_owned(),
        (user, password) => format!(
            "{scheme}://{}:{}@{rest}",
            escape(user.as_deref().unwrap_or("")),
            escape(password.as_deref().unwrap_or(""))
        ),
    }
}

#[cfg(feature = "tls")]
fn certificates(tls: &locksmith_core::driver::url::TlsFiles) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls.identity.as_ref().map(|(cert, key)| redis::ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.clone(),
        }),
        root_cert: tls.ca.clone(),
    }
}

#[cfg(not(feature = "tls"))]
fn needs_tls() -> RedisError {
    RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "rediss:// needs the `tls` feature",
    ))
}

#[cfg(feature = "tls")]
fn with_sentinel_tls(builder: SentinelClientBuilder, config: &Config) -> RedisResult<SentinelClientBuilder> {
    let Some(tls) = &config.tls else { return Ok(builder) };
    locksmith_core::driver::tls::install_provider();
    // rediss+sentinel://: the sentinels are reached over TLS too, with the same files.
    Ok(builder
        .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
        .set_client_to_redis_certificates(certificates(tls))
        .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure)
        .set_client_to_sentinel_certificates(certificates(tls)))
}

#[cfg(not(feature = "tls"))]
fn with_sentinel_tls(builder: SentinelClientBuilder, config: &Config) -> RedisResult<SentinelClientBuilder> {
    match config.tls {
        None => Ok(builder),
        Some(_) => Err(needs_tls()),
    }
}

#[cfg(feature = "tls")]
fn with_cluster_tls(builder: ClusterClientBuilder, config: &Config) -> ClusterClientBuilder {
    match &config.tls {
        None => builder,
        Some(tls) => {
            locksmith_core::driver::tls::install_provider();
            builder.tls(redis::TlsMode::Secure).certs(certificates(tls))
        }
    }
}

#[cfg(not(feature = "tls"))]
fn with_cluster_tls(builder: ClusterClientBuilder, _: &Config) -> ClusterClientBuilder {
    builder
}
