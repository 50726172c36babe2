//! The whole lockcore conformance suite against a real etcd (`LOCKSMITH_TEST_ETCD`), default
//! layout. Every locker is its own `connect()`: its own client and session lease.

mod common;

use std::time::Duration;

use backend_etcd::{Layout, DEFAULT_NAMESPACE};
use etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use lockcore::conformance::Harness;
use lockcore::{async_trait, BackendUrl, LockName, Locker};

/// The single test server's minimum lease TTL (scripts/backends configures it for 1 s leases).
const TTL: Duration = Duration::from_secs(1);

struct EtcdHarness {
    url: BackendUrl,
    admin: Client,
    layout: Layout,
}

async fn harness() -> EtcdHarness {
    common::init_tracing();
    let base = common::env_url("LOCKSMITH_TEST_ETCD");
    let url = BackendUrl::parse(&common::with_query(&base, "ttl=1s")).expect("LOCKSMITH_TEST_ETCD");
    EtcdHarness {
        admin: common::admin(&base).await,
        url,
        layout: Layout::Default {
            namespace: DEFAULT_NAMESPACE.to_owned(),
        },
    }
}

#[async_trait]
impl Harness for EtcdHarness {
    async fn locker(&self) -> Locker {
        backend_etcd::connect(&self.url).await.expect("connect to etcd")
    }

    async fn delete_behind_back(&self, name: &LockName) {
        let prefix = self.layout.lock_prefix(name);
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let resp = self
            .admin
            .kv_client()
            .get(prefix.as_str(), Some(options))
            .await
            .expect("get holder");
        let holder = resp.kvs().first().expect("no holder to delete").key().to_vec();
        let deleted = self
            .admin
            .kv_client()
            .delete(holder, None)
            .await
            .expect("delete holder");
        assert_eq!(deleted.deleted(), 1);
    }

    async fn residue(&self, name: &LockName) -> Vec<String> {
        common::keys_under(&self.admin, &self.layout.lock_prefix(name)).await
    }

    fn short_ttl(&self) -> Duration {
        TTL
    }
}

lockcore::conformance_tests!(harness().await);
