//! Shared by the example tests: the backends to run on and unique lock names.

#![allow(dead_code)] // each test file uses a different subset

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

#[allow(unused_imports)] // used only when a backend feature is on
pub use locksmith_core::conformance::env_url;

/// `mem://` and every backend compiled in (its test server must be up).
pub fn backend_urls() -> Vec<(&'static str, String)> {
    #[allow(unused_mut)]
    let mut urls = vec![("mem", "mem://".to_owned())];
    #[cfg(feature = "file")]
    urls.push((
        "file",
        format!(
            "file://{}",
            std::env::temp_dir().join("locksmith-examples-test").display()
        ),
    ));
    #[cfg(feature = "etcd")]
    urls.push(("etcd", env_url("LOCKSMITH_TEST_ETCD")));
    #[cfg(feature = "zk")]
    urls.push(("zk", env_url("LOCKSMITH_TEST_ZK")));
    #[cfg(feature = "redis")]
    urls.push(("redis", env_url("LOCKSMITH_TEST_REDIS")));
    #[cfg(feature = "postgres")]
    urls.push(("postgres", env_url("LOCKSMITH_TEST_POSTGRES")));
    #[cfg(feature = "mysql")]
    urls.push(("mysql", env_url("LOCKSMITH_TEST_MYSQL")));
    urls
}

/// A lock (or store) name no other test or earlier run uses.
pub fn unique(test: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!(
        "examples-{test}-{}-{nanos:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}
