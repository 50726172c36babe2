//! Shared helpers of the ZooKeeper backend's tests: the server URLs, an admin client that reaches
//! around the lock, and the node layout as the backend builds it.

#![allow(dead_code)] // each test binary uses a different part

use std::time::Duration;

use locksmith_core::conformance::Harness;
use locksmith_core::driver::{async_trait, BackendUrl, LockName};
use locksmith_core::{Family, Locker};
use zookeeper_client as zk;

/// The namespace every test locks under.
pub const NAMESPACE: &str = "/locksmith-test";

pub use locksmith_core::conformance::env_url;

/// `base` (e.g. `zk://127.0.0.1:21810`) with the test namespace and `options`.
pub fn url_with(base: &str, options: &str) -> BackendUrl {
    let base = base.trim_end_matches('/');
    BackendUrl::parse(&format!("{base}{NAMESPACE}?{options}")).expect("test URL")
}

/// A locker on its own session.
pub async fn locker(base: &str, options: &str) -> Locker {
    locksmith_zk::connect(&url_with(base, options))
        .await
        .expect("connect to ZooKeeper")
}

/// A plain ZooKeeper client for `base`, to look at and change nodes behind the lock's back.
pub async fn admin(base: &str) -> zk::Client {
    let url = BackendUrl::parse(base).expect("test URL");
    let hosts = url.hosts.iter().map(|h| h.to_addr(2181)).collect::<Vec<_>>().join(",");
    let connect = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(&hosts);
    tokio::time::timeout(Duration::from_secs(20), connect)
        .await
        .expect("admin connect timed out")
        .expect("admin connect")
}

/// The lock node of `name`.
pub fn lock_path(name: &LockName) -> String {
    format!("{NAMESPACE}/{}", name.encoded())
}

/// The node of `name` in `family`: `<namespace>/<encoded><suffix>`.
pub fn family_path(family: Family, name: &LockName) -> String {
    format!("{NAMESPACE}/{}", family.segment(name))
}

/// The contender nodes of the mutex `name`, in queue order (holder first).
pub async fn contenders(admin: &zk::Client, name: &LockName) -> Vec<String> {
    children_of(admin, &lock_path(name)).await
}

/// The children of `path` as full paths, in queue order (by the sequence number ZooKeeper
/// appended, the last 10 characters, whatever the prefix); none if `path` does not exist.
pub async fn children_of(admin: &zk::Client, path: &str) -> Vec<String> {
    let mut children = match admin.list_children(path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Vec::new(),
        Err(e) => panic!("listing {path}: {e}"),
    };
    children.sort_by_key(|c| c[c.len().saturating_sub(10)..].to_owned());
    children.into_iter().map(|c| format!("{path}/{c}")).collect()
}

/// The holder and waiter entries of `name` in `family`: the contenders of a mutex, read-write
/// lock or election; for a semaphore, one entry per contender whether it has a lease, a node in
/// the internal lock or both (locksmith gives both nodes of one contender the same `_c_<uuid>-`):
/// its lease if it has one, else its internal-lock node.
pub async fn entries(admin: &zk::Client, family: Family, name: &LockName) -> Vec<String> {
    let path = family_path(family, name);
    if family != Family::Semaphore {
        return children_of(admin, &path).await;
    }
    let leases = children_of(admin, &format!("{path}/leases")).await;
    let locks = children_of(admin, &format!("{path}/locks")).await;
    let contender = |node: &str| {
        let child = node.rsplit('/').next().unwrap_or(node);
        child.get(..40).unwrap_or(child).to_owned() // `_c_` + 36-character uuid + `-`
    };
    let mut seen = std::collections::HashSet::new();
    leases
        .into_iter()
        .chain(locks)
        .filter(|node| seen.insert(contender(node)))
        .collect()
}

/// `base` (a URL that may have a query of its own) with the test namespace and `options` added.
pub fn with_namespace(base: &str, options: &str) -> String {
    let (url, query) = base.split_once('?').unwrap_or((base, ""));
    let url = url.trim_end_matches('/');
    let query: Vec<&str> = [query, options].into_iter().filter(|q| !q.is_empty()).collect();
    format!("{url}{NAMESPACE}?{}", query.join("&"))
}

/// The session timeout of the conformance lockers: short, so expiry tests are quick, but well
/// above the server's minimum and a busy machine's hiccups.
pub const CONFORMANCE_SESSION: Duration = Duration::from_secs(3);

/// The options of the conformance lockers' URL: the short session timeout, and a connect timeout
/// far above a busy machine's slowest connect (a connect is not what these tests time).
fn conformance_options() -> String {
    format!(
        "session_timeout={}ms&connect_timeout=30s",
        CONFORMANCE_SESSION.as_millis()
    )
}

/// The conformance harness: lockers on `url` (each its own session), an admin client to reach
/// around the lock.
pub struct ZkHarness {
    url: String,
    admin: zk::Client,
}

impl ZkHarness {
    /// On the plain server (`LOCKSMITH_TEST_ZK`).
    pub async fn plain() -> ZkHarness {
        Self::plain_with(&conformance_options()).await
    }

    /// On the plain server, with the URL options `options` in place of the conformance ones.
    pub async fn plain_with(options: &str) -> ZkHarness {
        let base = env_url("LOCKSMITH_TEST_ZK");
        ZkHarness {
            url: with_namespace(&base, options),
            admin: admin(&base).await,
        }
    }

    /// On the secured server (`LOCKSMITH_TEST_ZK_SECURE`: TLS and digest credentials); the admin
    /// client uses its plaintext port with the same digest identity, which the ACL lets in.
    pub async fn secure() -> ZkHarness {
        let base = env_url("LOCKSMITH_TEST_ZK_SECURE");
        ZkHarness {
            url: with_namespace(&base, &conformance_options()),
            admin: Self::secure_admin().await,
        }
    }

    /// A client of the secured server's plaintext port (`LOCKSMITH_TEST_ZK_SECURE_PLAIN`) with the
    /// digest identity of `LOCKSMITH_TEST_ZK_SECURE`.
    pub async fn secure_admin() -> zk::Client {
        let base = env_url("LOCKSMITH_TEST_ZK_SECURE");
        let plain = env_url("LOCKSMITH_TEST_ZK_SECURE_PLAIN");
        let parsed = BackendUrl::parse(&base).expect("secure URL");
        let (user, password) = parsed.credentials.clone().expect("credentials in the secure URL");
        let auth = format!("{user}:{}", password.unwrap_or_default());
        let connect = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .with_auth("digest", auth.as_bytes())
            .connect(&plain);
        tokio::time::timeout(Duration::from_secs(20), connect)
            .await
            .expect("admin connect timed out")
            .expect("admin connect")
    }
}

#[async_trait]
impl Harness for ZkHarness {
    async fn locker(&self) -> Locker {
        locksmith_zk::connect(&BackendUrl::parse(&self.url).expect("URL"))
            .await
            .expect("connect to ZooKeeper")
    }

    async fn delete_behind_back(&self, name: &LockName) {
        self.delete_behind_back_in(Family::Mutex, name).await;
    }

    async fn delete_behind_back_in(&self, family: Family, name: &LockName) {
        let holder = entries(&self.admin, family, name)
            .await
            .into_iter()
            .next()
            .expect("a holder to delete");
        self.admin
            .delete(&holder, None)
            .await
            .expect("delete the holder's node");
    }

    async fn residue(&self, name: &LockName) -> Vec<String> {
        contenders(&self.admin, name).await
    }

    async fn residue_in(&self, family: Family, name: &LockName) -> Vec<String> {
        entries(&self.admin, family, name).await
    }

    fn short_ttl(&self) -> Duration {
        CONFORMANCE_SESSION
    }
}

/// `host:port` of every server of `base`.
pub fn server_addrs(base: &str) -> Vec<String> {
    let url = BackendUrl::parse(base).expect("test URL");
    url.hosts.iter().map(|h| h.to_addr(2181)).collect()
}

/// How many packets a server of `servers` received on the connection of `session`, read with the
/// `cons` four-letter word (one line per connection: ` /127.0.0.1:41234[1](queued=0,recved=643,sent=643,sid=0x1...,...)`)
/// of each server in turn until one has it.
pub async fn packets_received(servers: &[String], session: i64) -> Received {
    let sid = format!("sid={:#x},", session as u64);
    let mut seen = String::new();
    for server in servers {
        let out = four_letter_word(server, "cons").await;
        let found = out.lines().find(|line| line.contains(&sid)).and_then(|line| {
            let connection = line.trim_start().split('(').next()?.to_owned();
            let packets = line
                .split(['(', ','])
                .find_map(|field| field.strip_prefix("recved=")?.parse().ok())?;
            Some(Received { connection, packets })
        });
        if let Some(found) = found {
            return found;
        }
        seen.push_str(&out);
    }
    panic!("no connection with {sid} in `cons` of {servers:?} (is it whitelisted?):\n{seen}")
}

/// What [`packets_received`] read: the count of one connection of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The client's end of the connection as the server names it (`/127.0.0.1:41234[1]`).
    pub connection: String,
    /// Packets the server received on it.
    pub packets: u64,
}

impl Received {
    /// The packets received since `earlier`, if both counts are of the same connection: a client
    /// that reconnected (a missed ping on a loaded machine) starts a new count, and the
    /// difference would say nothing.
    pub fn since(&self, earlier: &Received) -> Option<u64> {
        (self.connection == earlier.connection && self.packets >= earlier.packets)
            .then(|| self.packets - earlier.packets)
    }
}

/// The answer of `server` to the four-letter word `word`.
async fn four_letter_word(server: &str, word: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let read = async {
        let mut conn = tokio::net::TcpStream::connect(server)
            .await
            .expect("connect for a four-letter word");
        conn.write_all(word.as_bytes()).await.expect("send a four-letter word");
        let mut out = String::new();
        conn.read_to_string(&mut out)
            .await
            .expect("read a four-letter word's answer");
        out
    };
    locksmith_core::conformance::within(Duration::from_secs(10), word, read).await
}
