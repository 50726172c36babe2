//! The CLI against a real etcd (`LOCKSMITH_TEST_ETCD`). Locks live under the namespace
//! `locksmith-cli-test`; "behind its back" is `etcdctl del --prefix` on the lock's keys.
#![cfg(feature = "etcd")]

mod common;

use std::process::Command;

use common::{env_url, Backend};

const NAMESPACE: &str = "locksmith-cli-test";

struct Etcd;

impl Backend for Etcd {
    fn url(&self) -> String {
        format!("{}/{NAMESPACE}", env_url("LOCKSMITH_TEST_ETCD").trim_end_matches('/'))
    }

    fn delete_behind_back(&self, name: &str) {
        let base = env_url("LOCKSMITH_TEST_ETCD");
        let endpoints = base.trim_start_matches("etcd://").trim_end_matches('/');
        let encoded = locksmith::driver::LockName::new(name).expect("name");
        let prefix = format!("{NAMESPACE}/{}/", encoded.encoded());
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoints, "del", "--prefix", &prefix])
            .output()
            .expect("cannot run etcdctl (installed by scripts/backends up)");
        let deleted = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && deleted.trim() == "1",
            "etcdctl del {prefix}: {deleted} {:?}",
            out
        );
    }
}

crate::cli_suite!(Etcd);
