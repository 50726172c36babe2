//! What the suite runs against: each backend in each topology `scripts/backends` starts, with the
//! URL options of the suite, the servers its faults touch, and the faults that apply to it.

use std::fmt;
use std::time::Duration;

use anyhow::{bail, Result};
use locksmith::driver::BackendUrl;

/// A fault the suite injects (the names are the JSON contract's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// Nothing: the baseline.
    None,
    /// The holder's whole process group is stopped (`SIGSTOP`) for 2–3 TTLs, then resumed.
    Pause,
    /// The holder is killed (`SIGKILL`); a new worker takes its place.
    Kill,
    /// The holder's traffic to the server is frozen or cut (both ways or one) for 2 TTLs.
    Partition,
    /// The server is stopped and started again (Redis without persistence loses its data).
    Restart,
    /// The cluster's leader is killed, and started again a TTL later.
    LeaderKill,
    /// One follower is cut off from everyone (stopped with `SIGSTOP`) for 2 TTLs.
    MinorityPartition,
    /// Redis Sentinel: `SENTINEL FAILOVER` (the replica becomes the master, the old master its
    /// replica), with no server down. PostgreSQL's primary and standby: the primary killed (every
    /// process at once), the standby promoted, the old primary made its standby again.
    Failover,
    /// Redis Sentinel, a failover after a replication lag: the replica is stopped (`SIGSTOP`) for
    /// 5/8 of a TTL while renewals reach the master alone, the master is killed, the replica
    /// resumed and promoted without them, the old master started again as its replica. The same
    /// on PostgreSQL's primary and synchronous standby (whose commits wait for the standby
    /// meanwhile).
    LagFailover,
    /// A real partition (the servers' network namespaces, `scripts/backends isolate`): a cluster
    /// member (the leader, or a follower, in turn) or the Redis Sentinel master is cut off from
    /// every other server while the clients still reach it, then healed.
    NetPartition,
    /// The server's wall clock stepped (servers started with `LOCKSMITH_BACKENDS_CLOCKS=1`,
    /// `scripts/backends clock`): by +10 s, −10 s, +1 h and −1 h in turn, held for 2 TTLs, then
    /// stepped back to the true time.
    ClockJump,
}

impl Fault {
    /// Every fault, in report order.
    pub const ALL: [Fault; 11] = [
        Fault::None,
        Fault::Pause,
        Fault::Kill,
        Fault::Partition,
        Fault::Restart,
        Fault::LeaderKill,
        Fault::MinorityPartition,
        Fault::Failover,
        Fault::LagFailover,
        Fault::NetPartition,
        Fault::ClockJump,
    ];

    /// Whether it makes a Redis Sentinel or Cluster fail over.
    pub fn fails_over(self) -> bool {
        matches!(
            self,
            Fault::LeaderKill | Fault::Failover | Fault::LagFailover | Fault::NetPartition
        )
    }

    /// The name in the JSON output and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Pause => "pause",
            Fault::Kill => "kill",
            Fault::Partition => "partition",
            Fault::Restart => "restart",
            Fault::LeaderKill => "leader-kill",
            Fault::MinorityPartition => "minority-partition",
            Fault::Failover => "failover",
            Fault::LagFailover => "lag-failover",
            Fault::NetPartition => "net-partition",
            Fault::ClockJump => "clock-jump",
        }
    }

    /// The fault named `name`.
    pub fn parse(name: &str) -> Result<Fault> {
        match Fault::ALL.iter().find(|f| f.name() == name) {
            Some(f) => Ok(*f),
            None => bail!("unknown fault {name:?}"),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One backend in one topology.
#[derive(Clone, Debug)]
pub struct Target {
    /// `mem`, `file`, `etcd`, `zk`, `redis`, `postgres` or `mysql`.
    pub backend: &'static str,
    /// `single`, `cluster`, `ensemble` or `quorum`.
    pub topology: &'static str,
    /// The URL the workers use (before the driver puts its proxies in), with the suite's options.
    pub url: String,
    /// The lease TTL (the session TTL on etcd and ZooKeeper).
    pub ttl: Duration,
    /// The server `restart` stops and starts (`scripts/backends` id).
    pub restart: Option<&'static str>,
    /// The leader group of `scripts/backends leader` (clusters), or for Redis Cluster the kind
    /// (`redis-cluster`) whose `slot-owner` is the leader of the lock's slot.
    pub group: Option<&'static str>,
    /// The members of the cluster, for `minority-partition`.
    pub members: &'static [&'static str],
    /// A Redis topology with automatic failover (Sentinel, Cluster): its URL names sentinels or
    /// seed nodes, not the servers that hold the locks (so the suite's proxies cannot partition a
    /// holder), and `leader-kill` waits for the failover before it starts the old master again.
    pub fails_over: bool,
    /// Whether the members run in network namespaces of their own (`scripts/backends up` with
    /// `LOCKSMITH_BACKENDS_NETNS=1` exports `LOCKSMITH_TEST_NETNS=1`), for `net-partition`.
    pub netns: bool,
    /// The server whose wall clock `clock-jump` steps, when the servers run under the clock shim
    /// (`LOCKSMITH_BACKENDS_CLOCKS=1` exports `LOCKSMITH_TEST_CLOCKS=1`).
    pub clock: Option<&'static str>,
}

impl Target {
    /// `backend/topology`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.backend, self.topology)
    }

    /// Whether `fault` applies here.
    pub fn has(&self, fault: Fault) -> bool {
        if matches!(self.group, Some("postgres-ha" | "mysql-ha")) {
            // What the pair adds to the single server is the failover (the other faults are the
            // single server's, measured there; a leader "kill and start again" would make two
            // primaries).
            return matches!(fault, Fault::None | Fault::Failover | Fault::LagFailover);
        }
        match fault {
            Fault::None => true,
            Fault::Pause | Fault::Kill => self.backend != "mem",
            // No network between a file:// worker and its locks: nothing to partition.
            Fault::Partition => !matches!(self.backend, "mem" | "file") && !self.fails_over,
            Fault::Restart => self.restart.is_some(),
            Fault::LeaderKill => self.group.is_some(),
            Fault::MinorityPartition => !self.members.is_empty(),
            Fault::Failover | Fault::LagFailover => self.group == Some("redis-sentinel"),
            Fault::ClockJump => self.clock.is_some(),
            Fault::NetPartition => {
                self.netns && matches!(self.group, Some("etcd-cluster" | "zk-ensemble" | "redis-sentinel"))
            }
        }
    }

    /// Whether a failover here moves the locks to another server (Redis Sentinel and Cluster,
    /// PostgreSQL's primary and standby): holds then last 3 TTLs, and the failovers' count applies.
    pub fn replicated(&self) -> bool {
        self.fails_over || matches!(self.group, Some("postgres-ha" | "mysql-ha"))
    }

    /// Whether a grant here may be lost in a failover by design (Redis Sentinel and Cluster
    /// without replica confirmation, PostgreSQL with `replication=async`): mutual exclusion is
    /// not promised through a failover, only fencing; the primitives' runs leave them out.
    pub fn unconfirmed(&self) -> bool {
        (self.fails_over && !self.topology.ends_with("+confirm")) || self.topology.ends_with("+async")
    }

    /// Whether `fault` runs here in `--quick` mode (the run of every `scripts/test`): each
    /// mechanism once, the rest left to the full run.
    /// - On the failover topologies, only the faults that fail over (the others are the single
    ///   server's, measured there), and on Redis Sentinel not the planned `SENTINEL FAILOVER`:
    ///   the master killed and the failover after a lag are its harder cases.
    /// - On the etcd cluster and the ZooKeeper ensemble, not the holder's pause and kill: those
    ///   strike the worker process, with the same client as on the single server.
    /// - PostgreSQL's pair without replica confirmation (`+async`), only the failover after a
    ///   lag: the one that loses grants, which the fencing tokens' clock floor must survive (the
    ///   baseline and the plain failover are the confirmed pair's).
    /// - MariaDB's pair, only the failover (its primary killed, its replica promoted): the rest is
    ///   the single server's, or PostgreSQL's mechanism measured there.
    pub fn has_quick(&self, fault: Fault) -> bool {
        if !self.has(fault) {
            return false;
        }
        if self.group == Some("mysql-ha") {
            return fault == Fault::Failover;
        }
        if self.fails_over {
            return fault.fails_over() && !(fault == Fault::Failover && self.group == Some("redis-sentinel"));
        }
        if self.topology.ends_with("+async") {
            return fault == Fault::LagFailover;
        }
        if matches!(self.group, Some("etcd-cluster" | "zk-ensemble")) {
            return !matches!(fault, Fault::Pause | Fault::Kill);
        }
        true
    }

    /// The hosts (`host:port`) of the URL, which the driver replaces by its proxies.
    pub fn hosts(&self) -> Result<Vec<String>> {
        let url = BackendUrl::parse(&self.url)?;
        Ok(url.hosts.iter().map(|h| h.to_addr(0)).collect())
    }

    /// The URL with its hosts replaced by `hosts`.
    pub fn url_with_hosts(&self, hosts: &[String]) -> Result<String> {
        let old = self.hosts()?.join(",");
        if old.is_empty() {
            return Ok(self.url.clone());
        }
        Ok(self.url.replacen(&old, &hosts.join(","), 1))
    }
}

/// The URL of a `LOCKSMITH_TEST_*` variable, or an error telling how to start the servers.
pub fn env_url(var: &str) -> Result<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Ok(url.trim_end_matches('/').to_owned()),
        _ => bail!("{var} is not set: start the servers with `eval \"$(scripts/backends up)\"` (scripts/chaos does)"),
    }
}

/// Every target, from the `LOCKSMITH_TEST_*` variables. `ttl` is the lease TTL of single servers;
/// clusters get at least 2 s (etcd's minimum there).
pub fn all(ttl: Duration) -> Result<Vec<Target>> {
    let secs = |d: Duration| format!("{}ms", d.as_millis());
    let cluster_ttl = ttl.max(Duration::from_secs(2));
    let etcd =
        |base: String, ttl: Duration| format!("{base}/chaos?ttl={}&request_timeout=2s&connect_timeout=3s", secs(ttl));
    let zk = |base: String, ttl: Duration| {
        format!(
            "{base}/chaos?session_timeout={}&request_timeout=2s&connect_timeout=3s",
            secs(ttl)
        )
    };
    let postgres = |base: String, ttl: Duration| {
        format!(
            "{base}?schema=chaos&ttl={}&request_timeout=2s&connect_timeout=3s",
            secs(ttl)
        )
    };
    // MariaDB: the test database; the suite's lock names are its own.
    let mysql = |base: String, ttl: Duration| format!("{base}?ttl={}&request_timeout=2s&connect_timeout=3s", secs(ttl));
    let redis = |base: String, ttl: Duration| {
        format!(
            "{base}/0?prefix=chaos:&restart_delay={}&waiter_ttl=2s&connect_timeout=1s&response_timeout=1s",
            secs(ttl)
        )
    };
    // Sentinel and Cluster: a lease long enough to ride out most failovers (2-4 s here).
    let failover_ttl = ttl.max(Duration::from_secs(4));
    let failover = |base: String, confirm: bool| {
        format!(
            "{base}?prefix=chaos:&restart_delay={}&waiter_ttl=2s&connect_timeout=1s&response_timeout=1s{}",
            secs(failover_ttl),
            // Confirmation is the default on both; the unconfirmed runs opt out explicitly.
            if confirm {
                "&min_replicas=1&replica_timeout=500ms"
            } else {
                "&min_replicas=0"
            }
        )
    };
    let netns = std::env::var("LOCKSMITH_TEST_NETNS").is_ok_and(|v| v == "1");
    let clocks = std::env::var("LOCKSMITH_TEST_CLOCKS").is_ok_and(|v| v == "1");
    let clock = |id: &'static str| clocks.then_some(id);
    let sentinel = env_url("LOCKSMITH_TEST_REDIS_SENTINEL")?;
    let cluster = env_url("LOCKSMITH_TEST_REDIS_CLUSTER")?;
    let failover_target = |topology: &'static str, url: String, group: &'static str| Target {
        backend: "redis",
        topology,
        url,
        ttl: failover_ttl,
        restart: None,
        group: Some(group),
        members: &[],
        fails_over: true,
        netns,
        clock: None,
    };
    // A primary and its synchronous standby: the failover kills the primary and promotes the
    // standby; with a lease long enough to ride it out (2-3 s here).
    let postgres_ha = Target {
        backend: "postgres",
        topology: "ha",
        url: postgres(env_url("LOCKSMITH_TEST_POSTGRES_HA")?, failover_ttl),
        ttl: failover_ttl,
        restart: None,
        group: Some("postgres-ha"),
        members: &[],
        fails_over: false,
        netns: false,
        clock: None,
    };
    // A MariaDB primary and its semi-synchronous replica, as a user without a proxy deploys it:
    // the URL names both (`mysql://…@ha1,ha2/…`), the client connects to the one that takes
    // writes, and `replication=sync` (the default with several hosts) refuses a primary without
    // semi-synchronous replication. The failover kills the primary, whose connections end; the
    // workers' next connections skip the read-only replica until it is promoted.
    let mysql_ha = Target {
        backend: "mysql",
        topology: "ha",
        url: mysql(env_url("LOCKSMITH_TEST_MYSQL_HA")?, failover_ttl),
        ttl: failover_ttl,
        restart: None,
        group: Some("mysql-ha"),
        members: &[],
        fails_over: false,
        netns: false,
        clock: None,
    };
    Ok(vec![
        Target {
            backend: "mem",
            topology: "single",
            url: "mem://chaos".into(),
            ttl,
            restart: None,
            group: None,
            members: &[],
            fails_over: false,
            netns: false,
            clock: None,
        },
        // Lock files shared by the worker processes of this machine (no server: pause and kill).
        Target {
            backend: "file",
            topology: "single",
            url: format!("file://{}?request_timeout=2s", file_dir().display()),
            ttl,
            restart: None,
            group: None,
            members: &[],
            fails_over: false,
            netns: false,
            clock: None,
        },
        Target {
            backend: "etcd",
            topology: "single",
            url: etcd(env_url("LOCKSMITH_TEST_ETCD")?, ttl),
            ttl,
            restart: Some("etcd"),
            group: None,
            members: &[],
            fails_over: false,
            netns: false,
            clock: None,
        },
        Target {
            backend: "etcd",
            topology: "cluster",
            url: etcd(env_url("LOCKSMITH_TEST_ETCD_CLUSTER")?, cluster_ttl),
            ttl: cluster_ttl,
            restart: Some("etcd-2"),
            group: Some("etcd-cluster"),
            members: &["etcd-1", "etcd-2", "etcd-3"],
            fails_over: false,
            netns,
            clock: None,
        },
        Target {
            backend: "zk",
            topology: "single",
            url: zk(env_url("LOCKSMITH_TEST_ZK")?, ttl),
            ttl,
            restart: Some("zk"),
            group: None,
            members: &[],
            fails_over: false,
            netns: false,
            clock: clock("zk"),
        },
        Target {
            backend: "zk",
            topology: "ensemble",
            url: zk(env_url("LOCKSMITH_TEST_ZK_ENSEMBLE")?, cluster_ttl),
            ttl: cluster_ttl,
            restart: Some("zk-2"),
            group: Some("zk-ensemble"),
            members: &["zk-1", "zk-2", "zk-3"],
            fails_over: false,
            netns,
            clock: None,
        },
        // One PostgreSQL server; a restart keeps its data (the fencing tokens are in a table).
        Target {
            backend: "postgres",
            topology: "single",
            url: postgres(env_url("LOCKSMITH_TEST_POSTGRES")?, ttl),
            ttl,
            restart: Some("postgres"),
            group: None,
            members: &[],
            fails_over: false,
            netns: false,
            clock: None,
        },
        postgres_ha.clone(),
        // The same pair, with commits that do not wait for the standby (`replication=async`): a
        // failover after a lag loses grants and renewals by design, so a holder may be overtaken
        // without being told; tokens still grow (the clock's floor), so no stale write may be
        // accepted.
        Target {
            topology: "ha+async",
            url: format!("{}&replication=async", postgres_ha.url),
            ..postgres_ha
        },
        // One MariaDB server; a restart keeps its data (the fencing counters are in a table).
        Target {
            backend: "mysql",
            topology: "single",
            url: mysql(env_url("LOCKSMITH_TEST_MYSQL")?, ttl),
            ttl,
            restart: Some("mysql"),
            group: None,
            members: &[],
            fails_over: false,
            netns: false,
            clock: None,
        },
        mysql_ha,
        Target {
            backend: "redis",
            topology: "single",
            url: redis(env_url("LOCKSMITH_TEST_REDIS")?, ttl),
            ttl,
            restart: Some("redis"),
            group: None,
            members: &[],
            fails_over: false,
            netns: false,
            clock: clock("redis"),
        },
        Target {
            backend: "redis",
            topology: "quorum",
            url: redis(env_url("LOCKSMITH_TEST_REDIS_QUORUM")?, ttl),
            ttl,
            restart: Some("redis-q1"),
            group: None,
            members: &[],
            fails_over: false,
            netns: false,
            clock: clock("redis-q1"),
        },
        failover_target("sentinel", failover(sentinel.clone(), false), "redis-sentinel"),
        failover_target("sentinel+confirm", failover(sentinel, true), "redis-sentinel"),
        failover_target("cluster", failover(cluster.clone(), false), "redis-cluster"),
        failover_target("cluster+confirm", failover(cluster, true), "redis-cluster"),
    ])
}

/// The lock directory of the `file://` target: this run's own (tens of thousands of lock files
/// by its end), removed when the run ends (`main.rs`).
pub fn file_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("locksmith-chaos-{}", std::process::id()))
}
