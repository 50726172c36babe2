//! Shared helpers of the Redis backend's tests: server addresses, the conformance harness, and a
//! raw admin connection.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use locksmith_core::conformance::Harness;
use locksmith_core::driver::{async_trait, BackendUrl, LockName};
use locksmith_core::{Family, Locker};
use locksmith_redis::{KindKeys, LockKeys};

pub use locksmith_core::conformance::env_url;

/// The single test server (`LOCKSMITH_TEST_REDIS`).
pub fn redis_url() -> String {
    env_url("LOCKSMITH_TEST_REDIS")
}

/// The `host:port` of [`redis_url`] (for a proxy in front of it).
pub fn redis_upstream() -> String {
    redis_url()
        .strip_prefix("redis://")
        .and_then(|rest| rest.split(['/', '?']).next())
        .expect("a redis://host:port URL")
        .to_owned()
}

/// The three independent masters (`LOCKSMITH_TEST_REDIS_QUORUM`), as single-host URLs.
pub fn quorum_hosts() -> Vec<String> {
    let url = env_url("LOCKSMITH_TEST_REDIS_QUORUM");
    let hosts = url
        .strip_prefix("redis://")
        .expect("a redis:// URL")
        .split(['/', '?'])
        .next()
        .unwrap_or("");
    hosts.split(',').map(|h| format!("redis://{h}")).collect()
}

/// `base` with extra query options.
pub fn with_options(base: &str, options: &str) -> String {
    if options.is_empty() {
        base.to_owned()
    } else if base.contains('?') {
        format!("{base}&{options}")
    } else {
        format!("{base}?{options}")
    }
}

/// The Sentinel topology (`LOCKSMITH_TEST_REDIS_SENTINEL`: a master and a replica, three
/// sentinels).
pub fn sentinel_url() -> String {
    env_url("LOCKSMITH_TEST_REDIS_SENTINEL")
}

/// The Redis Cluster (`LOCKSMITH_TEST_REDIS_CLUSTER`: three masters, each with a replica).
pub fn cluster_url() -> String {
    env_url("LOCKSMITH_TEST_REDIS_CLUSTER")
}

/// A raw connection for any topology: a server's, or a cluster's (which routes each command to
/// its key's node).
#[derive(Clone)]
pub enum Admin {
    Server(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Admin {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Admin::Server(c) => c.req_packed_command(cmd),
            Admin::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Admin::Server(c) => c.req_packed_commands(pipeline, offset, count),
            Admin::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// A raw connection to what `url` names: its single server, the master its sentinels name now,
/// or its cluster.
pub async fn admin_for(url: &str) -> Admin {
    let parsed = BackendUrl::parse(url).expect("url");
    let hosts: Vec<String> = parsed.hosts.iter().map(|h| h.to_addr(6379)).collect();
    let connect = async {
        match parsed.scheme.as_str() {
            "redis+sentinel" => {
                let mut sentinel = redis::sentinel::SentinelClient::build(
                    hosts.iter().map(|h| format!("redis://{h}")).collect(),
                    parsed.path.clone(),
                    None,
                    redis::sentinel::SentinelServerType::Master,
                )
                .expect("sentinel client");
                let client = sentinel.async_get_client().await.expect("the sentinels name a master");
                Admin::Server(
                    client
                        .get_multiplexed_async_connection()
                        .await
                        .expect("master connection"),
                )
            }
            "redis-cluster" => {
                let client = redis::cluster::ClusterClient::new(
                    hosts.iter().map(|h| format!("redis://{h}")).collect::<Vec<_>>(),
                )
                .expect("cluster client");
                Admin::Cluster(client.get_async_connection().await.expect("cluster connection"))
            }
            _ => Admin::Server(admin(url).await),
        }
    };
    tokio::time::timeout(Duration::from_secs(20), connect)
        .await
        .expect("admin connection timed out")
}

/// A raw connection to the server of a single-host `url`, as an operator or an old client has.
pub async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    let parsed = BackendUrl::parse(url).expect("url");
    let host = parsed.hosts[0].to_addr(6379);
    let db = if parsed.path.is_empty() {
        "0"
    } else {
        parsed.path.as_str()
    };
    let client = redis::Client::open(format!("redis://{host}/{db}")).expect("client");
    tokio::time::timeout(Duration::from_secs(10), client.get_multiplexed_async_connection())
        .await
        .expect("admin connection timed out")
        .expect("admin connection")
}

/// A raw connection over TLS to the server of a `rediss://` `url`, as its user, or as
/// `(user, password)` when given.
#[cfg(feature = "tls")]
pub async fn secure_admin(
    url: &str,
    who: Option<(&str, &str)>,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    // The redis client's rustls needs a process-wide crypto provider, which locksmith installs
    // when it connects; a test whose first TLS connection is this one (run alone, filtered)
    // panicked in rustls without it.
    locksmith_core::driver::tls::install_provider();
    let parsed = BackendUrl::parse(url).expect("url");
    let files = parsed.tls_files().expect("TLS files");
    let (user, password) = match who {
        Some((u, p)) => (u.to_owned(), p.to_owned()),
        None => (
            parsed.user().expect("a user").to_owned(),
            parsed.password().expect("password").expect("a password"),
        ),
    };
    let host = parsed.hosts[0].to_addr(6379);
    let client = redis::Client::build_with_tls(
        format!("rediss://{user}:{password}@{host}/0"),
        redis::TlsCertificates {
            client_tls: files.identity.map(|(client_cert, client_key)| redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
            root_cert: files.ca,
        },
    )?;
    tokio::time::timeout(Duration::from_secs(10), client.get_multiplexed_async_connection())
        .await
        .expect("admin connection timed out")
}

/// Connects a new Locker (its own connections) to `url`.
pub async fn locker(url: &str) -> Locker {
    let parsed = BackendUrl::parse(url).expect("url");
    locksmith_redis::connect(&parsed).await.expect("connect")
}

/// The user of [`url_without_functions`].
pub const NO_FUNCTIONS_USER: &str = "locksmith-no-functions";

/// The single test server's URL (with `options`) as a user whose ACL allows everything but
/// function libraries (`FUNCTION`, `FCALL`, `FCALL_RO`), as some managed Redis services set it:
/// locksmith must fall back to plain scripts (`EVALSHA`). Creates the user (again: the same
/// rules, so tests may race on it).
pub async fn url_without_functions(options: &str) -> String {
    url_as_user(
        NO_FUNCTIONS_USER,
        "no-functions-pass",
        &["-function", "-fcall", "-fcall_ro"],
        options,
    )
    .await
}

/// The single test server's URL (with `options`) as `user` (password `password`), a user with
/// every right but those `taken` away (ACL rules such as `-fcall`). Creates the user, or sets the
/// same rules again.
pub async fn url_as_user(user: &str, password: &str, taken: &[&str], options: &str) -> String {
    let base = redis_url();
    let mut conn = admin(&base).await;
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg("on")
        .arg(format!(">{password}"))
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg(taken)
        .exec_async(&mut conn)
        .await
        .expect("ACL SETUSER");
    let rest = base.strip_prefix("redis://").expect("a redis:// URL");
    with_options(&format!("redis://{user}:{password}@{rest}"), options)
}

/// The conformance harness over one Redis server with the given URL options.
pub struct RedisHarness {
    pub url: String,
    parsed: BackendUrl,
    admin: Admin,
}

impl RedisHarness {
    /// On the single test server, with `options`.
    pub async fn new(options: &str) -> RedisHarness {
        RedisHarness::on(&with_options(&redis_url(), options)).await
    }

    /// On the single test server as the user of [`url_without_functions`].
    pub async fn without_functions() -> RedisHarness {
        RedisHarness::on(&url_without_functions("").await).await
    }

    /// On whatever `url` names (a server, sentinels, a cluster).
    pub async fn on(url: &str) -> RedisHarness {
        let parsed = BackendUrl::parse(url).expect("url");
        RedisHarness {
            admin: admin_for(url).await,
            url: url.to_owned(),
            parsed,
        }
    }

    /// On the secured server (`LOCKSMITH_TEST_REDIS_SECURE`: mutual TLS and an ACL user); the
    /// admin connection is the same user over the same TLS.
    #[cfg(feature = "tls")]
    pub async fn secure() -> RedisHarness {
        let url = env_url("LOCKSMITH_TEST_REDIS_SECURE");
        let parsed = BackendUrl::parse(&url).expect("url");
        RedisHarness {
            admin: Admin::Server(secure_admin(&url, None).await.expect("admin connection")),
            url,
            parsed,
        }
    }

    pub fn keys(&self, name: &LockName) -> LockKeys {
        LockKeys::for_url(&self.parsed, name).expect("keys")
    }

    /// The keys of a semaphore, read-write lock or election.
    pub fn kind_keys(&self, family: Family, name: &LockName) -> KindKeys {
        KindKeys::for_url(&self.parsed, family, name).expect("keys")
    }
}

/// The server's clock in ms (on a cluster: some node's; they share this machine's clock).
pub async fn server_ms(conn: &mut Admin) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    secs * 1000 + micros / 1000
}

/// The holders (before their deadline) and the waiters of a semaphore, read-write lock or
/// election, as `holder:<entry>` and `waiter:<entry>`.
pub async fn kind_entries(conn: &mut Admin, keys: &KindKeys) -> Vec<String> {
    let now = server_ms(conn).await;
    let holders: Vec<String> = redis::cmd("ZRANGEBYSCORE")
        .arg(&keys.holders)
        .arg(format!("({now}"))
        .arg("+inf")
        .query_async(conn)
        .await
        .expect("ZRANGEBYSCORE");
    let waiters: Vec<String> = redis::cmd("ZRANGE")
        .arg(&keys.queue)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .expect("ZRANGE");
    let holders = holders.into_iter().map(|h| format!("holder:{h}"));
    holders
        .chain(waiters.into_iter().map(|w| format!("waiter:{w}")))
        .collect()
}

#[async_trait]
impl Harness for RedisHarness {
    async fn locker(&self) -> Locker {
        locker(&self.url).await
    }

    /// `key` with the hash tag of the lock's holder key: in the lock's slot on a Cluster.
    fn guarded_key(&self, family: Family, name: &str, key: &str) -> String {
        let name = LockName::new(name).expect("a valid lock name");
        let holder = if family == Family::Mutex {
            LockKeys::for_url(&self.parsed, &name).expect("keys").lock
        } else {
            KindKeys::for_url(&self.parsed, family, &name).expect("keys").holders
        };
        let tag = match (holder.find('{'), holder.find('}')) {
            (Some(open), Some(close)) if close > open + 1 => holder[open + 1..close].to_owned(),
            _ => holder.clone(),
        };
        format!("{key}{{{tag}}}")
    }

    async fn delete_behind_back(&self, name: &LockName) {
        let deleted: i64 = redis::cmd("DEL")
            .arg(self.keys(name).lock)
            .query_async(&mut self.admin.clone())
            .await
            .expect("DEL");
        assert_eq!(deleted, 1, "no holder to remove");
    }

    async fn delete_behind_back_in(&self, family: Family, name: &LockName) {
        if family == Family::Mutex {
            return self.delete_behind_back(name).await;
        }
        let deleted: i64 = redis::cmd("DEL")
            .arg(self.kind_keys(family, name).holders)
            .query_async(&mut self.admin.clone())
            .await
            .expect("DEL");
        assert_eq!(deleted, 1, "no holder to remove");
    }

    async fn residue(&self, name: &LockName) -> Vec<String> {
        let keys = self.keys(name);
        let mut conn = self.admin.clone();
        let holder: Option<String> = redis::cmd("GET")
            .arg(&keys.lock)
            .query_async(&mut conn)
            .await
            .expect("GET");
        let queued: Vec<String> = redis::cmd("ZRANGE")
            .arg(&keys.queue)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .expect("ZRANGE");
        holder.into_iter().chain(queued).collect()
    }

    async fn residue_in(&self, family: Family, name: &LockName) -> Vec<String> {
        if family == Family::Mutex {
            return self.residue(name).await;
        }
        kind_entries(&mut self.admin.clone(), &self.kind_keys(family, name)).await
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }
}

/// Whether the server of a single-host `url` answers PING right now.
pub async fn answers(url: &str) -> bool {
    let parsed = BackendUrl::parse(url).expect("url");
    let Ok(client) = redis::Client::open(format!("redis://{}/0", parsed.hosts[0].to_addr(6379))) else {
        return false;
    };
    let ping = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING").query_async::<String>(&mut conn).await.ok()
    };
    matches!(tokio::time::timeout(Duration::from_secs(2), ping).await, Ok(Some(_)))
}

/// Logs to the test output, filtered by RUST_LOG (default: warnings).
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
}

/// Serializes the tests of one test binary that fail servers over, kill or stop them: each holds
/// this while it runs, so that they do not disturb one another.
pub static FAULTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `scripts/backends ARGS` from async code (on a blocking thread, so that the watchdogs of the
/// test's locks keep running meanwhile); panics if it fails.
pub async fn backends(args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        locksmith_core::conformance::servers::backends(&args)
    })
    .await
    .expect("scripts/backends task")
}

/// Polls `scripts/backends ARGS` (at most `limit`) until its output is not `old`; `None` while it
/// fails (e.g. `leader` when no server is master yet).
pub async fn wait_for_change(args: &[&str], old: &str, limit: Duration) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/backends");
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let out = tokio::process::Command::new("bash")
            .arg(std::env::var("LOCKSMITH_BACKENDS_SCRIPT").unwrap_or_else(|_| script.to_owned()))
            .args(args)
            .output()
            .await
            .expect("running scripts/backends");
        let now = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() && !now.is_empty() && now != old {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "scripts/backends {args:?} still says {old:?} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A contender that tries to take `name` every 100 ms until stopped, and records every grant it
/// got (at once released) with its time: a grant while the holder still holds is a double grant.
pub struct Contender {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Vec<(tokio::time::Instant, u64)>>,
}

impl Contender {
    pub fn start(locker: Locker, name: String) -> Contender {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut grants = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    if let Ok(Some(g)) = locker.lock(&name).ttl(Duration::from_secs(2)).try_acquire().await {
                        grants.push((tokio::time::Instant::now(), g.fencing_token()));
                        let _ = g.release().await;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                grants
            }
        });
        Contender { stop, task }
    }

    /// Stops and returns the grants it got.
    pub async fn stop(self) -> Vec<(tokio::time::Instant, u64)> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.await.expect("contender task")
    }
}

/// A holder, a waiter queued behind it and a contender on one lock, and `fault(lock name)` in the
/// middle (a failover, a resharding): the holder keeps the lock through the fault (its renewals
/// reach the new master), the waiter gets the lock once it is released, with a larger fencing
/// token, nobody gets it before, and nothing is left behind.
pub async fn holds_through<F, Fut>(url: &str, ttl: Duration, fault: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use locksmith_core::conformance::{unique_name, within};
    let (a, b, c) = (locker(url).await, locker(url).await, locker(url).await);
    let name = unique_name("fault");
    let held = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    let token = held.fencing_token();
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).ttl(ttl).timeout(Duration::from_secs(120)).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.inspect(&name).await.expect("inspect").waiters, 1);
    let contender = Contender::start(c.clone(), name.clone());

    fault(name.clone()).await;

    // A TTL after the fault: had no renewal reached the new master since, the lease would be over.
    tokio::time::sleep(ttl.max(Duration::from_secs(3))).await;
    assert!(held.is_held(), "the holder lost its lock: {:?}", held.lost_reason());
    assert!(c.inspect(&name).await.expect("inspect").holder.is_some());
    let released_at = tokio::time::Instant::now();
    held.release().await.expect("release after the fault");
    let got = within(Duration::from_secs(30), "the waiter after the fault", waiter)
        .await
        .expect("waiter task")
        .expect("a waiter queued before the fault gets the lock");
    assert!(
        got.fencing_token() > token,
        "fencing went from {token} to {}",
        got.fencing_token()
    );
    got.release().await.expect("release");
    let grants = contender.stop().await;
    assert!(
        grants.iter().all(|(at, _)| *at >= released_at),
        "a contender got the lock while it was held: {grants:?}"
    );
    let info = c.inspect(&name).await.expect("inspect");
    assert!(info.holder.is_none() && info.waiters == 0, "left behind: {info:?}");
}

/// `cmdstat_<name>` → calls, from `INFO commandstats`: every command the server has run.
pub async fn command_counts(conn: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Puts a fake waiter at the head of the mutex queue of lock `name` on the server of `url`, its
/// entry live for `live_ms` more milliseconds of server time, as a crashed process would leave it.
pub async fn plant_dead_waiter(url: &str, name: &str, live_ms: i64) {
    plant_dead_waiter_asking(url, name, live_ms, None).await
}

/// [`plant_dead_waiter`], whose last step asked for a lock TTL of `ttl_ms` if given (what a
/// locksmith waiter's step records, and a release hands the lock over for).
pub async fn plant_dead_waiter_asking(url: &str, name: &str, live_ms: i64, ttl_ms: Option<i64>) {
    let keys = LockKeys::for_url(&BackendUrl::parse(url).unwrap(), &LockName::new(name).unwrap()).unwrap();
    let mut admin = admin(url).await;
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut admin).await.expect("TIME");
    let now_ms = secs * 1000 + micros / 1000;
    let dead = "deadbeefdeadbeefdeadbeefdeadbeef";
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(&keys.queue)
        .arg(0)
        .arg(dead)
        .ignore()
        .cmd("HSET")
        .arg(&keys.alive)
        .arg(dead)
        .arg(now_ms + live_ms)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&keys.queue)
        .arg(60_000)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&keys.alive)
        .arg(60_000)
        .ignore()
        .query_async(&mut admin)
        .await
        .expect("plant");
    if let Some(ttl_ms) = ttl_ms {
        let _: () = redis::cmd("HSET")
            .arg(&keys.alive)
            .arg(format!("{dead}/ttl"))
            .arg(ttl_ms)
            .query_async(&mut admin)
            .await
            .expect("plant the TTL");
    }
}
