//! `examples/swap_backend.rs`: the same function gives mutual exclusion and increasing fencing
//! tokens on every backend compiled in.

mod examples_support;
#[allow(dead_code)]
#[path = "../examples/swap_backend.rs"]
mod swap_backend;

use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_code_works_on_every_backend() {
    for (backend, url) in examples_support::backend_urls() {
        let name = examples_support::unique("swap");
        let s = tokio::time::timeout(Duration::from_secs(120), swap_backend::contend(&url, &name, 3, 3))
            .await
            .unwrap_or_else(|_| panic!("{backend}: did not finish"))
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(s.backend, backend);
        assert_eq!(s.max_inside, 1, "{backend}: two workers held the lock at once");
        assert_eq!(s.tokens.len(), 9, "{backend}");
        assert!(
            s.tokens.windows(2).all(|w| w[0] < w[1]),
            "{backend}: tokens did not increase: {:?}",
            s.tokens
        );
        assert!(
            s.effective_ttl >= Duration::from_secs(5),
            "{backend}: effective TTL {:?}",
            s.effective_ttl
        );
    }
}

#[test]
fn every_compiled_backend_is_listed() {
    if std::env::var_os("LOCKSMITH_URL").is_some() {
        return; // the example then runs on that URL only
    }
    let listed: Vec<&str> = swap_backend::backends().into_iter().map(|(b, _)| b).collect();
    let mut expected = vec!["mem"];
    if cfg!(feature = "file") {
        expected.push("file");
    }
    if cfg!(feature = "etcd") {
        expected.push("etcd");
    }
    if cfg!(feature = "zk") {
        expected.push("zk");
    }
    if cfg!(feature = "redis") {
        expected.push("redis");
    }
    if cfg!(feature = "postgres") {
        expected.push("postgres");
    }
    if cfg!(feature = "mysql") {
        expected.push("mysql");
    }
    assert_eq!(listed, expected);
}
