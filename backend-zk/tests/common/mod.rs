//! Shared helpers of the ZooKeeper backend's tests: the server URLs, an admin client that reaches
//! around the lock, and the node layout as the backend builds it.

#![allow(dead_code)] // each test binary uses a different part

use std::time::Duration;

use lockcore::{BackendUrl, LockName, Locker};
use zookeeper_client as zk;

/// The namespace every test locks under.
pub const NAMESPACE: &str = "/locksmith-test";

pub use lockcore::conformance::env_url;

/// `base` (e.g. `zk://127.0.0.1:21810`) with the test namespace and `options`.
pub fn url_with(base: &str, options: &str) -> BackendUrl {
    let base = base.trim_end_matches('/');
    BackendUrl::parse(&format!("{base}{NAMESPACE}?{options}")).expect("test URL")
}

/// A locker on its own session.
pub async fn locker(base: &str, options: &str) -> Locker {
    backend_zk::connect(&url_with(base, options))
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

/// The contender nodes of `name`, in queue order (holder first).
pub async fn contenders(admin: &zk::Client, name: &LockName) -> Vec<String> {
    let path = lock_path(name);
    let mut children = match admin.list_children(&path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Vec::new(),
        Err(e) => panic!("listing {path}: {e}"),
    };
    // By the sequence number ZooKeeper appended (the last 10 characters), whatever the prefix.
    children.sort_by_key(|c| c[c.len().saturating_sub(10)..].to_owned());
    children.into_iter().map(|c| format!("{path}/{c}")).collect()
}
