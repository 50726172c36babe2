//! The whole lockcore conformance suite against a real ZooKeeper (`LOCKSMITH_TEST_ZK`); every
//! locker has its own session.

mod common;

use std::time::Duration;

use lockcore::conformance::Harness;
use lockcore::{async_trait, LockName, Locker};
use zookeeper_client as zk;

/// The session timeout of the lockers under test: short, so expiry tests are quick, but well above
/// the server's minimum and a busy machine's hiccups.
const SESSION_TIMEOUT: Duration = Duration::from_secs(3);

struct ZkHarness {
    base: String,
    admin: zk::Client,
}

async fn harness() -> ZkHarness {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let admin = common::admin(&base).await;
    ZkHarness { base, admin }
}

#[async_trait]
impl Harness for ZkHarness {
    async fn locker(&self) -> Locker {
        common::locker(
            &self.base,
            &format!("session_timeout={}ms", SESSION_TIMEOUT.as_millis()),
        )
        .await
    }

    async fn delete_behind_back(&self, name: &LockName) {
        let holder = common::contenders(&self.admin, name)
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
        common::contenders(&self.admin, name).await
    }

    fn short_ttl(&self) -> Duration {
        SESSION_TIMEOUT
    }
}

lockcore::conformance_tests!(harness().await);
