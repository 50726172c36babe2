//! The CLI against a real Redis (`LOCKSMITH_TEST_REDIS`), in the default and the plain layout.
#![cfg(feature = "redis")]

mod common;

use common::{env_url, Backend};

/// Redis with locksmith's default key layout.
struct RedisDefault;

/// Redis with `?layout=plain`: the lock key is the raw lock name.
struct RedisPlain;

fn delete(key: &str) {
    let url = env_url("LOCKSMITH_TEST_REDIS");
    let client = redis::Client::open(url.as_str()).expect("redis URL");
    let mut con = client.get_connection().expect("cannot connect to Redis");
    let deleted: i64 = redis::cmd("DEL").arg(key).query(&mut con).expect("DEL");
    assert_eq!(deleted, 1, "no key {key:?} to delete on Redis");
}

impl Backend for RedisDefault {
    fn url(&self) -> String {
        env_url("LOCKSMITH_TEST_REDIS")
    }
    fn delete_behind_back(&self, name: &str) {
        let encoded = locksmith::LockName::new(name).expect("name");
        delete(&format!("locksmith:{{{}}}:lock", encoded.encoded()));
    }
}

impl Backend for RedisPlain {
    fn url(&self) -> String {
        format!("{}?layout=plain", env_url("LOCKSMITH_TEST_REDIS"))
    }
    fn delete_behind_back(&self, name: &str) {
        delete(name);
    }
}

mod default_layout {
    use super::*;
    crate::cli_suite!(RedisDefault);
}

mod plain_layout {
    use super::*;
    crate::cli_suite!(RedisPlain);
}
