//! The `redis://` URL: hosts, database, credentials and the query options this backend knows.

use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::Result;

/// The query options `redis://` and `rediss://` accept (the TLS and secret options every backend
/// shares among them: `ca`, `cert`, `key`, `server_name`, `password_file`).
pub const OPTIONS: &[&str] = &[
    "ttl",
    "prefix",
    "layout",
    "connect_timeout",
    "response_timeout",
    "waiter_ttl",
    "fence_floor",
    "restart_delay",
    "poller_gap",
    "max_pass_over",
    "ca",
    "cert",
    "key",
    "server_name",
    "password_file",
    "db",
    "min_replicas",
    "replica_timeout",
    "eviction",
];

const DEFAULT_PORT: u16 = 6379;
pub(crate) const DEFAULT_PREFIX: &str = "locksmith:";
/// Where every guarded-write data key begins (`guarded.rs`): a prefix may not.
pub(crate) const DATA_PREFIX: &str = "locksmith-data:";
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
const DEFAULT_WAITER_TTL: Duration = Duration::from_secs(10);
/// How long an acquire waits for its replicas to confirm (`replica_timeout`).
const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_millis(500);
/// `min_replicas` on Sentinel and Cluster when the URL sets none: one replica confirms every grant
/// and renewal (the failover of either promotes the most up-to-date replica, so one that
/// acknowledged is the one promoted). `min_replicas=0` opts out.
pub(crate) const DEFAULT_MIN_REPLICAS_ON_FAILOVER: u32 = 1;

/// How long locksmith clients hand a plain-layout lock to each other before leaving it free for
/// `poller_gap`, when the URL sets a `poller_gap` but no `max_pass_over`.
const DEFAULT_MAX_PASS_OVER: Duration = Duration::from_secs(1);

/// The default `restart_delay`, 15 s, the default lock TTL ([`locksmith_core::DEFAULT_TTL`]): no TTL
/// may be longer (see the crate docs, "After data loss").
pub const DEFAULT_RESTART_DELAY: Duration = locksmith_core::DEFAULT_TTL;

/// Where the lock key lives and what it holds (see the crate docs, "Key layout").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `<prefix>{<encoded name>}:lock` and its sibling keys: every key of one lock in one hash slot.
    Default,
    /// The lock key is exactly the lock name, as redis-py's `Lock`, redsync and node-redlock use it.
    Plain,
}

/// A lower bound for fencing tokens, so that they keep growing when the server loses its
/// counters (a restart without persistence, a flush) and counters can expire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceFloor {
    /// No floor: the counter alone, which then never expires (`?fence_floor=none`). Tokens start
    /// over when the server loses its data.
    None,
    /// Tokens are at least this number (`?fence_floor=N`); the counter never expires.
    Fixed(u64),
    /// The default (`?fence_floor=time`): tokens are at least the server's clock in microseconds
    /// since the Unix epoch, so they keep growing across data loss as long as that clock does;
    /// the counter expires an hour after it was created (the next grant starts it again at the
    /// clock).
    Time,
}

impl FenceFloor {
    /// The script argument: `""`, a number, or `"time"`.
    pub(crate) fn arg(self) -> String {
        match self {
            FenceFloor::None => String::new(),
            FenceFloor::Fixed(n) => n.to_string(),
            FenceFloor::Time => "time".into(),
        }
    }
}

/// How the servers of a URL are arranged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    /// `redis://h` (one server) or `redis://h1,h2,h3` (independent masters, a quorum).
    Servers,
    /// `redis+sentinel://s1,s2/master`: the master that these sentinels name, followed across
    /// failovers.
    Sentinel {
        /// The sentinels, `(host, port)`.
        sentinels: Vec<(String, u16)>,
        /// The name the sentinels monitor the master under.
        master: String,
    },
    /// `redis-cluster://h1,h2`: a Redis Cluster, found from these seed nodes.
    Cluster {
        /// The seed nodes, `(host, port)`.
        seeds: Vec<(String, u16)>,
    },
}

/// The default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;

/// Everything `connect` reads from the URL.
#[derive(Clone)]
pub(crate) struct Config {
    /// How the servers are arranged.
    pub(crate) topology: Topology,
    /// The database number (0 on a cluster).
    pub(crate) db: u32,
    /// The user and password of the data servers (for the sentinel and cluster clients; the
    /// `node_urls` carry them too).
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    /// Replicas that must confirm an acquire (`WAIT`) before it is trusted; 0: none.
    pub(crate) min_replicas: u32,
    /// How long an acquire waits for them.
    pub(crate) replica_timeout: Duration,
    /// The TTL of locks whose builder sets none (`ttl`); `None`: locksmith-core's default.
    pub(crate) default_ttl: Option<Duration>,
    /// One `redis[s]://user:pass@host:port/db` connection URL per master (it holds the password:
    /// never shown; `Config` has no `Debug`).
    pub(crate) node_urls: Vec<String>,
    /// TLS (`rediss://`), with its files read.
    pub(crate) tls: Option<locksmith_core::driver::url::TlsFiles>,
    /// The master addresses as given, for messages.
    pub(crate) addrs: Vec<String>,
    pub(crate) prefix: String,
    pub(crate) layout: Layout,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) waiter_ttl: Duration,
    pub(crate) fence_floor: FenceFloor,
    pub(crate) restart_delay: Duration,
    /// Plain layout: how long the lock is left free for polling clients (0: never).
    pub(crate) poller_gap: Duration,
    /// Plain layout: how long locksmith clients may hand the lock to each other before a gap.
    pub(crate) max_pass_over: Duration,
    /// `eviction=allow`: connect to a master whose `maxmemory-policy` may evict lock keys (with a
    /// warning) instead of refusing it (see [`crate::conn::admit`]).
    pub(crate) allow_eviction: bool,
}

/// The form of a URL's scheme: which [`Topology`] its hosts make.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Servers,
    Sentinel,
    Cluster,
}

/// The replica confirmation of grants: `min_replicas` and `replica_timeout`.
struct Replicas {
    min: u32,
    timeout: Duration,
}

/// The plain layout's sharing with polling clients: `poller_gap` and `max_pass_over`.
struct Polling {
    gap: Duration,
    max_pass_over: Duration,
}

impl Config {
    /// Validates `url`; every problem is a [`locksmith_core::LockError::InvalidUrl`].
    pub(crate) fn parse(url: &BackendUrl) -> Result<Config> {
        let (tls, kind) = scheme(url)?;
        url.expect_only_options(OPTIONS)?;
        let hosts = url.expect_hosts()?;
        let (topology, db) = topology(url, kind)?;
        let connect_timeout = url.positive_duration_option("connect_timeout", DEFAULT_CONNECT_TIMEOUT)?;
        let response_timeout = url.positive_duration_option("response_timeout", DEFAULT_RESPONSE_TIMEOUT)?;
        let replicas = replicas(url, &topology, hosts.len(), response_timeout)?;
        let (prefix, layout) = keys(url)?;
        let allow_eviction = match url.query.get("eviction").map(String::as_str) {
            None | Some("refuse") => false,
            Some("allow") => true,
            Some(other) => return Err(url.error(format!("eviction={other:?}; expected refuse or allow"))),
        };
        let waiter_ttl = url.positive_duration_option("waiter_ttl", DEFAULT_WAITER_TTL)?;
        if waiter_ttl < Duration::from_millis(300) {
            return Err(url.error("waiter_ttl must be at least 300ms"));
        }
        let fence_floor = fence_floor(url)?;
        let (restart_delay, default_ttl) = restart_delay_and_ttl(url)?;
        let polling = polling(url, layout)?;
        let tls_files = tls_files(url, tls)?;
        let password = url.password()?;
        let (addrs, node_urls) = node_urls(url, &topology, db, tls, password.as_deref());
        Ok(Config {
            topology,
            db,
            user: url.user().map(str::to_owned),
            password,
            min_replicas: replicas.min,
            replica_timeout: replicas.timeout,
            default_ttl,
            node_urls,
            tls: tls.then_some(tls_files),
            addrs,
            prefix,
            layout,
            connect_timeout,
            response_timeout,
            waiter_ttl,
            fence_floor,
            restart_delay,
            poller_gap: polling.gap,
            max_pass_over: polling.max_pass_over,
            allow_eviction,
        })
    }

    /// How many masters must agree: all of one, or a majority of several.
    pub(crate) fn quorum(&self) -> usize {
        self.node_urls.len() / 2 + 1
    }

    /// Whether a mutex's release grants the lock to the head of its queue itself (the hand-over
    /// of `lua/mutex/release.lua`): only where one server's word is the grant. With several masters
    /// (quorum mode) a grant needs a majority, and with `min_replicas` the replicas' confirmation,
    /// which the waiter's own step asks for; there the release only wakes the head.
    pub(crate) fn hands_over(&self) -> bool {
        self.node_urls.len() == 1 && self.min_replicas == 0
    }
}

/// Whether the scheme asks for TLS, and the form of URL it is.
fn scheme(url: &BackendUrl) -> Result<(bool, Kind)> {
    Ok(match url.scheme.as_str() {
        "redis" => (false, Kind::Servers),
        "rediss" => (true, Kind::Servers),
        "redis+sentinel" => (false, Kind::Sentinel),
        "rediss+sentinel" => (true, Kind::Sentinel),
        "redis-cluster" => (false, Kind::Cluster),
        "rediss-cluster" => (true, Kind::Cluster),
        _ => {
            return Err(url.error(
                "expected redis://, rediss://, redis+sentinel://, rediss+sentinel://, redis-cluster:// or rediss-cluster://",
            ))
        }
    })
}

/// The servers and the database: the path is the database on `redis://`, the master's name on
/// a Sentinel URL (whose database is `db=`), nothing on a cluster (database 0).
fn topology(url: &BackendUrl, kind: Kind) -> Result<(Topology, u32)> {
    let hosts = url.expect_hosts()?;
    let number = |what: &str, text: &str| -> Result<u32> {
        text.parse()
            .map_err(|_| url.error(format!("{what} must be a database number, not {text:?}")))
    };
    let with_port = |default: u16| -> Vec<(String, u16)> {
        hosts
            .iter()
            .map(|h| (h.host.clone(), h.port.unwrap_or(default)))
            .collect()
    };
    match kind {
        Kind::Servers => {
            if url.query.contains_key("db") {
                return Err(url.error("give the database as the path: redis://host/N"));
            }
            let db = if url.path.is_empty() {
                0
            } else {
                number("the path", &url.path)?
            };
            // A quorum counts servers: one named twice would count twice toward a majority.
            let mut seen = std::collections::HashSet::new();
            for h in hosts {
                if !seen.insert((h.host.to_ascii_lowercase(), h.port.unwrap_or(DEFAULT_PORT))) {
                    return Err(url.error(format!(
                        "{} is named twice: the masters of a quorum must be different servers",
                        h.to_addr(DEFAULT_PORT)
                    )));
                }
            }
            Ok((Topology::Servers, db))
        }
        Kind::Sentinel => {
            if url.path.is_empty() || url.path.contains('/') {
                return Err(url.error("the path is the master's name: redis+sentinel://s1:26379,s2:26379/mymaster"));
            }
            let db = match url.query.get("db") {
                None => 0,
                Some(n) => number("db", n)?,
            };
            let (sentinels, master) = (with_port(SENTINEL_PORT), url.path.clone());
            Ok((Topology::Sentinel { sentinels, master }, db))
        }
        Kind::Cluster => {
            if !url.path.is_empty() || url.query.contains_key("db") {
                return Err(url.error("a Redis Cluster has only database 0: no path, no db="));
            }
            Ok((
                Topology::Cluster {
                    seeds: with_port(DEFAULT_PORT),
                },
                0,
            ))
        }
    }
}

/// `min_replicas` and `replica_timeout`. Replica confirmation is on by default where failing over
/// to a replica is the point of the topology (Sentinel, Cluster): an unconfirmed grant can be lost
/// with the master and granted again by the replica promoted in its place. One server (whose
/// failover, if any, happens outside locksmith's view) and a quorum of masters without replicas:
/// off.
fn replicas(url: &BackendUrl, topology: &Topology, hosts: usize, response_timeout: Duration) -> Result<Replicas> {
    let failover_topology = matches!(topology, Topology::Sentinel { .. } | Topology::Cluster { .. });
    let min = match url.query.get("min_replicas") {
        None if failover_topology => DEFAULT_MIN_REPLICAS_ON_FAILOVER,
        None => 0,
        Some(n) => n
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= 16)
            .ok_or_else(|| url.error(format!("min_replicas={n:?}: expected a number from 0 to 16")))?,
    };
    if min > 0 && *topology == Topology::Servers && hosts > 1 {
        return Err(url.error("min_replicas is for a master with replicas; the masters of a quorum have none"));
    }
    let timeout = url
        .duration_option("replica_timeout")?
        .unwrap_or(DEFAULT_REPLICA_TIMEOUT);
    if timeout.is_zero() {
        return Err(url.error("replica_timeout must be greater than zero"));
    }
    if min > 0 && timeout >= response_timeout {
        return Err(url.error(format!(
            "replica_timeout ({timeout:?}) must be shorter than response_timeout ({response_timeout:?}): \
             WAIT blocks for up to replica_timeout (min_replicas={min}; 0 turns replica confirmation off)"
        )));
    }
    Ok(Replicas { min, timeout })
}

/// Where the keys live: `prefix` (no hash-tag braces, not the data keys' prefix) and `layout`.
fn keys(url: &BackendUrl) -> Result<(String, Layout)> {
    let prefix = url
        .query
        .get("prefix")
        .cloned()
        .unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
    if prefix.contains(['{', '}']) {
        return Err(url.error("prefix must not contain { or } (they delimit the hash tag)"));
    }
    if prefix.starts_with(DATA_PREFIX) {
        return Err(url.error(format!(
            "prefix must not begin with {:?}: guarded writes' data keys do",
            DATA_PREFIX
        )));
    }
    let layout = match url.query.get("layout").map(String::as_str) {
        None | Some("default") => Layout::Default,
        Some("plain") => Layout::Plain,
        Some(other) => return Err(url.error(format!("layout={other:?}; expected default or plain"))),
    };
    Ok((prefix, layout))
}

/// `fence_floor`: `time` (the default), `none`, or a number below 2^52 (the scripts count in
/// Lua's doubles, exact up to 2^53, so a floor near that would leave no room for the tokens
/// after it: they would repeat).
fn fence_floor(url: &BackendUrl) -> Result<FenceFloor> {
    Ok(match url.query.get("fence_floor").map(String::as_str) {
        None | Some("time") => FenceFloor::Time,
        Some("none") => FenceFloor::None,
        Some(n) => FenceFloor::Fixed(
            n.parse()
                .ok()
                .filter(|n| *n < (1u64 << 52))
                .ok_or_else(|| url.error(format!("fence_floor={n:?}; expected time, none or a number below 2^52")))?,
        ),
    })
}

/// `restart_delay` and the default lock `ttl`, which may not be longer (see "After data loss" in
/// the crate docs).
fn restart_delay_and_ttl(url: &BackendUrl) -> Result<(Duration, Option<Duration>)> {
    let restart_delay = url.duration_option("restart_delay")?.unwrap_or(DEFAULT_RESTART_DELAY);
    if restart_delay > locksmith_core::MAX_TTL {
        return Err(url.error(format!("restart_delay must be at most {:?}", locksmith_core::MAX_TTL)));
    }
    let default_ttl = url.lock_ttl_option()?;
    if let Some(ttl) = default_ttl.filter(|ttl| !restart_delay.is_zero() && *ttl > restart_delay) {
        return Err(url.error(format!(
            "ttl={ttl:?} is longer than restart_delay ({restart_delay:?}): no lock's TTL may be longer \
             (see \"After data loss\" in the Redis backend's docs); raise restart_delay to at least the TTL"
        )));
    }
    Ok((restart_delay, default_ttl))
}

/// `poller_gap` and `max_pass_over`: for the plain layout only, the second with the first.
fn polling(url: &BackendUrl, layout: Layout) -> Result<Polling> {
    let gap = url.duration_option("poller_gap")?.unwrap_or(Duration::ZERO);
    let max_pass_over = url.duration_option("max_pass_over")?;
    if (!gap.is_zero() || max_pass_over.is_some()) && layout != Layout::Plain {
        return Err(
            url.error("poller_gap and max_pass_over are for layout=plain (clients that poll share only that layout)")
        );
    }
    if max_pass_over.is_some() && gap.is_zero() {
        return Err(url.error("max_pass_over needs a poller_gap"));
    }
    if gap > Duration::from_secs(60) {
        return Err(url.error("poller_gap must be at most 60s"));
    }
    Ok(Polling {
        gap,
        max_pass_over: max_pass_over.unwrap_or(DEFAULT_MAX_PASS_OVER),
    })
}

/// The TLS files, read: only on a `rediss` scheme, without `server_name` (the redis client
/// verifies the URL's host), and only with the `tls` feature.
fn tls_files(url: &BackendUrl, tls: bool) -> Result<locksmith_core::driver::url::TlsFiles> {
    let files = url.tls_files()?;
    if !tls && (files.ca.is_some() || files.identity.is_some() || files.server_name.is_some()) {
        return Err(url.error("ca, cert, key and server_name are TLS options: use rediss://"));
    }
    if files.server_name.is_some() {
        return Err(url.error(
            "server_name is not supported on rediss:// (the redis client verifies the host of the URL): \
             connect to a name the server's certificate has",
        ));
    }
    if tls && !cfg!(feature = "tls") {
        return Err(url.error("rediss:// needs the `tls` feature of locksmith (or of locksmith-redis)"));
    }
    Ok(files)
}

/// The masters' addresses (for messages) and connection URLs (with the credentials): one per
/// server of `redis://`; one logical server, found at run time, for Sentinel and Cluster.
fn node_urls(
    url: &BackendUrl,
    topology: &Topology,
    db: u32,
    tls: bool,
    password: Option<&str>,
) -> (Vec<String>, Vec<String>) {
    let auth = match (url.user(), password) {
        (None, None) => String::new(),
        (Some(user), None) => format!("{}@", escape(user)),
        (user, Some(pass)) => format!("{}:{}@", escape(user.unwrap_or("")), escape(pass)),
    };
    let scheme = if tls { "rediss" } else { "redis" };
    match topology {
        Topology::Servers => {
            let addrs: Vec<String> = url.hosts.iter().map(|h| h.to_addr(DEFAULT_PORT)).collect();
            let urls = addrs.iter().map(|a| format!("{scheme}://{auth}{a}/{db}")).collect();
            (addrs, urls)
        }
        Topology::Sentinel { master, .. } => (vec![format!("sentinel master {master:?}")], vec![String::new()]),
        Topology::Cluster { seeds } => {
            let seeds: Vec<String> = seeds.iter().map(|(h, p)| host_port(h, *p)).collect();
            (vec![format!("cluster {}", seeds.join(","))], vec![String::new()])
        }
    }
}

/// `host:port`, with an IPv6 host in brackets.
pub(crate) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Percent-encodes a user name or password for the connection URL.
pub(crate) fn escape(s: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config> {
        Config::parse(&BackendUrl::parse(s)?)
    }

    #[test]
    fn a_quorum_refuses_a_server_named_twice() {
        for url in [
            "redis://h1:6379,h2,H1",
            "redis://h1,h1:6379",
            "redis://[::1]:7000,h2,[::1]:7000",
        ] {
            let e = parse(url).err().expect("refused").to_string();
            assert!(e.contains("named twice"), "{url}: {e}");
        }
        assert_eq!(parse("redis://h1:6379,h1:6380,h2").unwrap().quorum(), 2);
    }

    #[test]
    fn reads_hosts_db_and_options() {
        let c = parse("redis://:p%40ss@h1,h2:7000,h3/2?prefix=app:&layout=plain&fence_floor=time&connect_timeout=1s")
            .unwrap();
        assert!(c.tls.is_none());
        assert_eq!(c.node_urls[0], "redis://:p%40ss@h1:6379/2");
        assert_eq!(c.node_urls[1], "redis://:p%40ss@h2:7000/2");
        assert_eq!(c.quorum(), 2);
        assert_eq!(c.prefix, "app:");
        assert_eq!(c.layout, Layout::Plain);
        assert_eq!(c.fence_floor, FenceFloor::Time);
        assert_eq!(c.connect_timeout, Duration::from_secs(1));
        assert_eq!(c.restart_delay, DEFAULT_RESTART_DELAY);
        let p = parse("redis://h?layout=plain&poller_gap=150ms").unwrap();
        assert_eq!(
            (p.poller_gap, p.max_pass_over),
            (Duration::from_millis(150), DEFAULT_MAX_PASS_OVER)
        );
        let n = parse("redis://h?fence_floor=none&restart_delay=0").unwrap();
        assert_eq!((n.fence_floor, n.restart_delay), (FenceFloor::None, Duration::ZERO));
        let d = parse("redis://localhost").unwrap();
        assert_eq!(d.node_urls, vec!["redis://localhost:6379/0"]);
        assert_eq!(
            (d.layout, d.fence_floor, d.quorum()),
            (Layout::Default, FenceFloor::Time, 1)
        );
    }

    #[test]
    fn reads_sentinel_and_cluster_urls() {
        let s = parse("redis+sentinel://:pw@s1,s2:26380/mymaster?db=3&min_replicas=1&replica_timeout=250ms").unwrap();
        assert_eq!(
            s.topology,
            Topology::Sentinel {
                sentinels: vec![("s1".into(), 26379), ("s2".into(), 26380)],
                master: "mymaster".into()
            }
        );
        assert_eq!(
            (s.db, s.min_replicas, s.replica_timeout),
            (3, 1, Duration::from_millis(250))
        );
        assert_eq!(s.password.as_deref(), Some("pw"));
        assert_eq!((s.node_urls.len(), s.quorum()), (1, 1));
        let c = parse("redis-cluster://h1:7000,h2:7001").unwrap();
        assert_eq!(
            c.topology,
            Topology::Cluster {
                seeds: vec![("h1".into(), 7000), ("h2".into(), 7001)]
            }
        );
        assert_eq!((c.db, c.quorum()), (0, 1));
        assert_eq!(c.replica_timeout, DEFAULT_REPLICA_TIMEOUT);
        assert_eq!(parse("redis://h?min_replicas=2").unwrap().min_replicas, 2);
    }

    #[test]
    fn replica_confirmation_is_on_by_default_where_failover_is_the_point() {
        let min = |url: &str| parse(url).unwrap().min_replicas;
        assert_eq!(min("redis+sentinel://s1/m"), 1);
        assert_eq!(min("redis-cluster://h1:7000"), 1);
        assert_eq!(min("redis+sentinel://s1/m?min_replicas=0"), 0);
        assert_eq!(min("redis-cluster://h1:7000?min_replicas=0"), 0);
        assert_eq!(min("redis-cluster://h1:7000?min_replicas=2"), 2);
        assert_eq!(min("redis://h"), 0);
        assert_eq!(min("redis://h1,h2,h3"), 0);
        // A response timeout too short for the default's WAIT names the option that turns it off.
        let e = parse("redis+sentinel://s1/m?response_timeout=300ms")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("min_replicas=1; 0 turns replica confirmation off"), "{e}");
        assert_eq!(min("redis+sentinel://s1/m?response_timeout=300ms&min_replicas=0"), 0);
    }

    #[test]
    fn ttl_is_the_default_lock_ttl_on_every_url_form() {
        for url in [
            "redis://h?ttl=2s",
            "redis://h1,h2,h3?ttl=2s",
            "redis+sentinel://s1,s2/mymaster?ttl=2s",
            "redis-cluster://h1,h2?ttl=2s",
            "redis://h/3?prefix=app:&ttl=2000ms&layout=plain",
        ] {
            assert_eq!(parse(url).unwrap().default_ttl, Some(Duration::from_secs(2)), "{url}");
        }
        #[cfg(feature = "tls")]
        for url in [
            "rediss://h?ttl=2s",
            "rediss+sentinel://s/m?ttl=2s",
            "rediss-cluster://h?ttl=2s",
        ] {
            assert_eq!(parse(url).unwrap().default_ttl, Some(Duration::from_secs(2)), "{url}");
        }
        assert_eq!(parse("redis://h").unwrap().default_ttl, None);
        // No longer than restart_delay, unless that is off.
        assert_eq!(
            parse("redis://h?ttl=1m&restart_delay=1m").unwrap().default_ttl,
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse("redis://h?ttl=1h&restart_delay=0").unwrap().default_ttl,
            Some(Duration::from_secs(3600))
        );
        for bad in [
            "redis://h?ttl=0",
            "redis://h?ttl=10ms",
            "redis://h?ttl=25h&restart_delay=0",
            "redis://h?ttl=soon",
            "redis://h?ttl=16s",
            "redis+sentinel://s/m?ttl=1m",
        ] {
            let e = parse(bad).err().expect(bad);
            assert!(matches!(e, locksmith_core::LockError::InvalidUrl { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("ttl="), "{bad}: {e}");
        }
    }

    #[test]
    fn rejects_bad_urls() {
        for bad in [
            "redis://",
            "redis://h/x",
            "redis://h?layout=fancy",
            "redis://h?prefix=%7B",
            "redis://h?bogus=1",
            "redis://h?connect_timeout=0",
            "redis://h?response_timeout=fast",
            "redis://h?fence_floor=-1",
            "redis://h?waiter_ttl=10ms",
            "redis://h?restart_delay=2d",
            "redis://h?ca=/etc/hostname",
            "rediss://h?server_name=x",
            "redis://h?restart_delay=soon",
            "redis://h?poller_gap=100ms",
            "redis://h?layout=plain&max_pass_over=1s",
            "redis://h?layout=plain&poller_gap=2m",
            "etcd://h",
            "redis://h?db=1",
            "redis+sentinel://s1,s2",
            "redis+sentinel://s1/a/b",
            "redis+sentinel://s1/m?db=x",
            "redis-cluster://h1/2",
            "redis-cluster://h1?db=1",
            "redis://h?min_replicas=17",
            "redis://h?min_replicas=-1",
            "redis://h1,h2,h3?min_replicas=1",
            "redis+sentinel://s/m?min_replicas=1&replica_timeout=0",
            "redis+sentinel://s/m?min_replicas=1&replica_timeout=5s",
            "redis+sentinel://s/m?min_replicas=1&replica_timeout=1s&response_timeout=1s",
            "redis+cluster://h",
        ] {
            assert!(
                matches!(parse(bad), Err(locksmith_core::LockError::InvalidUrl { .. })),
                "{bad}"
            );
        }
    }
}
