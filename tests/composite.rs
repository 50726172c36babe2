//! `run`, re-entry detection and `lock_all` (the composite conformance suite) on the real
//! backends: Redis (`LOCKSMITH_TEST_REDIS`) and `file://` (a directory of its own per test), all
//! of it; etcd, ZooKeeper, PostgreSQL and MySQL (`LOCKSMITH_TEST_ETCD`, `_ZK`, `_POSTGRES`,
//! `_MYSQL`) without the
//! two tests that remove a holder behind its back (their backends' own test harnesses know how).
//! Run with `cargo test -p locksmith --all-features --test composite`.

#[cfg(feature = "redis")]
mod redis_backend {
    use std::time::Duration;

    use locksmith::driver::{async_trait, BackendUrl, LockName};
    use locksmith::Locker;
    use locksmith_core::conformance::{env_url, Harness};

    /// Every locker a new connection to the test server; removal behind a holder's back is a
    /// `DEL` of its holder key, as an operator would do.
    struct RedisHarness {
        url: String,
    }

    fn harness() -> RedisHarness {
        RedisHarness {
            url: env_url("LOCKSMITH_TEST_REDIS"),
        }
    }

    #[async_trait]
    impl Harness for RedisHarness {
        async fn locker(&self) -> Locker {
            locksmith::connect(&self.url).await.expect("connect")
        }

        async fn delete_behind_back(&self, name: &LockName) {
            let parsed = BackendUrl::parse(&self.url).expect("url");
            let key = locksmith_redis::LockKeys::for_url(&parsed, name).expect("keys").lock;
            let client = redis::Client::open(self.url.as_str()).expect("client");
            let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
            let deleted: i64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await.expect("DEL");
            assert_eq!(deleted, 1, "no holder to remove");
        }

        /// Not used by the composite suite (it asks the locker's `inspect` instead).
        async fn residue(&self, _name: &LockName) -> Vec<String> {
            Vec::new()
        }

        fn short_ttl(&self) -> Duration {
            Duration::from_millis(500)
        }
    }

    // 200 rounds each: a real server's round trips, not a thousand.
    locksmith_core::composite_tests!(harness(), rounds = 200);
}

#[cfg(feature = "file")]
mod file_backend {
    use std::path::PathBuf;
    use std::time::Duration;

    use locksmith::driver::{async_trait, BackendUrl, LockName};
    use locksmith::{Family, Locker};
    use locksmith_core::conformance::Harness;

    /// A lock directory of its own; removal behind a holder's back deletes the lock's state file.
    struct FileHarness {
        dir: PathBuf,
        look: locksmith_file::FileBackend,
    }

    fn harness() -> FileHarness {
        let dir = std::env::temp_dir().join(format!("locksmith-composite-{:016x}", rand_suffix()));
        let url = format!("file://{}", dir.display());
        let look = locksmith_file::FileBackend::connect(&BackendUrl::parse(&url).expect("url")).expect("connect");
        FileHarness { dir, look }
    }

    fn rand_suffix() -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        hasher.finish()
    }

    impl Drop for FileHarness {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[async_trait]
    impl Harness for FileHarness {
        async fn locker(&self) -> Locker {
            locksmith::connect(&format!("file://{}", self.dir.display()))
                .await
                .expect("connect")
        }

        async fn delete_behind_back(&self, name: &LockName) {
            std::fs::remove_file(self.look.state_path(Family::Mutex, name)).expect("no state file to remove");
        }

        async fn residue(&self, name: &LockName) -> Vec<String> {
            self.look.entries(Family::Mutex, name).expect("reading the state file")
        }

        fn short_ttl(&self) -> Duration {
            Duration::from_millis(500)
        }
    }

    locksmith_core::composite_tests!(harness(), rounds = 200);
}

/// A backend reached by the URL in an environment variable, without removal behind a holder's
/// back: for `composite_tests!(no_removal: ...)`.
#[cfg(any(feature = "etcd", feature = "zk", feature = "postgres", feature = "mysql"))]
mod by_url {
    use std::time::Duration;

    use locksmith::driver::{async_trait, LockName};
    use locksmith::Locker;
    use locksmith_core::conformance::{env_url, Harness};

    pub struct UrlHarness {
        url: String,
    }

    impl UrlHarness {
        pub fn new(var: &str) -> UrlHarness {
            UrlHarness { url: env_url(var) }
        }
    }

    #[async_trait]
    impl Harness for UrlHarness {
        async fn locker(&self) -> Locker {
            locksmith::connect(&self.url).await.expect("connect")
        }

        async fn delete_behind_back(&self, _name: &LockName) {
            unreachable!("composite_tests!(no_removal: ...) removes nothing")
        }

        async fn residue(&self, _name: &LockName) -> Vec<String> {
            unreachable!("the composite suite reads no residue")
        }

        fn short_ttl(&self) -> Duration {
            Duration::from_secs(2)
        }
    }
}

#[cfg(feature = "etcd")]
mod etcd_backend {
    locksmith_core::composite_tests!(no_removal: super::by_url::UrlHarness::new("LOCKSMITH_TEST_ETCD"), rounds = 100);
}

#[cfg(feature = "zk")]
mod zk_backend {
    locksmith_core::composite_tests!(no_removal: super::by_url::UrlHarness::new("LOCKSMITH_TEST_ZK"), rounds = 100);
}

#[cfg(feature = "postgres")]
mod postgres_backend {
    locksmith_core::composite_tests!(no_removal: super::by_url::UrlHarness::new("LOCKSMITH_TEST_POSTGRES"), rounds = 100);
}

#[cfg(feature = "mysql")]
mod mysql_backend {
    locksmith_core::composite_tests!(no_removal: super::by_url::UrlHarness::new("LOCKSMITH_TEST_MYSQL"), rounds = 100);
}
