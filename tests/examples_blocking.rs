//! `examples/blocking.rs`: a synchronous program (plain `#[test]`, no runtime of the test's own)
//! takes, runs under and releases locks through `locksmith::blocking`, on `mem://` and every
//! backend compiled in (`file://` and Redis among them).
#![cfg(feature = "blocking")]

#[allow(dead_code)]
#[path = "../examples/blocking.rs"]
mod blocking_example;
mod examples_support;

#[test]
fn the_blocking_example_runs_on_every_backend() {
    for (backend, url) in examples_support::backend_urls() {
        let prefix = examples_support::unique("blocking");
        let token = blocking_example::demo(&url, &prefix).unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert!(token > 0, "{backend}");
        // Everything was released: another locker takes the locks at once.
        let locker = locksmith::blocking::connect(&url).expect("connect");
        let report = locker.lock(format!("{prefix}/report")).try_acquire().expect("try");
        assert!(report.is_some(), "{backend}: the report lock is still held");
        let accounts = [format!("{prefix}/accounts/alice"), format!("{prefix}/accounts/bob")];
        assert!(
            locker.lock_all(accounts).try_acquire().expect("try").is_some(),
            "{backend}"
        );
    }
}
