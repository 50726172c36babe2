//! The CLI against a real ZooKeeper (`LOCKSMITH_TEST_ZK`). Locks live under `/locksmith-cli-test`;
//! "behind its back" is an admin client deleting the holder's node.
#![cfg(feature = "zk")]

mod common;

use std::time::Duration;

use common::{env_url, Backend};
use zookeeper_client as zk;

const NAMESPACE: &str = "/locksmith-cli-test";

struct ZooKeeper;

impl Backend for ZooKeeper {
    fn url(&self) -> String {
        format!("{}{NAMESPACE}", env_url("LOCKSMITH_TEST_ZK").trim_end_matches('/'))
    }

    fn delete_behind_back(&self, name: &str) {
        let base = env_url("LOCKSMITH_TEST_ZK");
        let hosts = base.trim_start_matches("zk://").trim_end_matches('/').to_owned();
        let path = format!(
            "{NAMESPACE}/{}",
            locksmith::driver::LockName::new(name).expect("name").encoded()
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let connect = zk::Client::connector()
                .with_session_timeout(Duration::from_secs(10))
                .connect(&hosts);
            let admin = tokio::time::timeout(Duration::from_secs(20), connect)
                .await
                .expect("ZooKeeper admin connect timed out")
                .expect("ZooKeeper admin connect");
            let mut children = admin.list_children(&path).await.expect("list the lock's contenders");
            // The holder is the contender with the lowest sequence number (what follows "lock-").
            children.sort_by_key(|c| c.rsplit_once("lock-").map(|(_, seq)| seq.to_owned()));
            let holder = children.first().expect("no holder to delete");
            admin
                .delete(&format!("{path}/{holder}"), None)
                .await
                .expect("delete the holder's node");
        });
    }
}

crate::cli_suite!(ZooKeeper);
