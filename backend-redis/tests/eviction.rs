//! A Redis whose `maxmemory-policy` may evict keys (`LOCKSMITH_TEST_REDIS_EVICTING`, started by
//! `scripts/backends` with `maxmemory 2mb` and `allkeys-lru`): a held lock's key could vanish
//! there without its holder being told, and the lock be granted twice. Connecting refuses it,
//! naming the setting and the fix (it connected, silently), whether the policy is read with
//! `CONFIG GET` or, for a user that may not run `CONFIG`, from `INFO memory`; as one master of a
//! quorum too. `eviction=allow` connects anyway. The test server is shared: these tests only
//! read its settings (and add one ACL user), never change them.

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

fn evicting() -> String {
    common::env_url("LOCKSMITH_TEST_REDIS_EVICTING")
}

async fn connect(url: &str) -> Result<locksmith_core::Locker, LockError> {
    let parsed = BackendUrl::parse(url)?;
    within(Duration::from_secs(30), url, locksmith_redis::connect(&parsed)).await
}

fn assert_refused(e: &LockError, what: &str) {
    let LockError::Denied(message) = e else {
        panic!("{what}: not Denied: {e:?}");
    };
    for needle in [
        "maxmemory-policy is allkeys-lru",
        "CONFIG SET maxmemory-policy noeviction",
        "eviction=allow",
    ] {
        assert!(message.contains(needle), "{what}: {needle:?} missing from {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_evicts_is_refused_at_connect() {
    common::init_logs();
    let e = connect(&evicting()).await.expect_err("connected to an evicting redis");
    assert_refused(&e, "CONFIG GET");
}

/// Where `CONFIG` is refused (an ACL without it, as managed services set it), `INFO memory`
/// says the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_is_read_from_info_where_config_is_refused() {
    common::init_logs();
    let mut admin = common::admin(&evicting()).await;
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("locksmith-no-config")
        .arg("on")
        .arg(">no-config-pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-config")
        .exec_async(&mut admin)
        .await
        .expect("ACL SETUSER");
    let url = evicting().replacen("redis://", "redis://locksmith-no-config:no-config-pw@", 1);
    let e = connect(&url).await.expect_err("connected to an evicting redis");
    assert_refused(&e, "INFO memory");
}

/// A quorum is refused when one of its masters may evict, though a majority would answer
/// without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_with_one_evicting_master_is_refused() {
    common::init_logs();
    let host = |url: String| url.trim_start_matches("redis://").trim_end_matches('/').to_owned();
    let url = format!(
        "redis://{},{},{}",
        host(common::redis_url()),
        host(common::env_url("LOCKSMITH_TEST_REGISTER")),
        host(evicting())
    );
    // Every master answers within the connect timeout: the evicting one is among the answers.
    let e = connect(&url)
        .await
        .expect_err("connected to a quorum with an evicting master");
    assert_refused(&e, "quorum");
    assert!(e.to_string().contains(&host(evicting())), "{e}");
}

/// `eviction=allow`: connects (with a warning), and locks work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_allow_connects() {
    common::init_logs();
    let url = common::with_options(&evicting(), "eviction=allow&restart_delay=0");
    let locker = connect(&url).await.expect("connect with eviction=allow");
    let guard = locker
        .lock(unique_name("evicting"))
        .try_acquire()
        .await
        .expect("try")
        .expect("free");
    guard.release().await.expect("release");
    locker.shutdown().await.expect("shutdown");
    let bad = common::with_options(&evicting(), "eviction=maybe");
    assert!(matches!(connect(&bad).await, Err(LockError::InvalidUrl { .. })));
}
