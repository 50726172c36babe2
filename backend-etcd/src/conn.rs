//! The connection handle every request goes through, with the counters behind
//! [`crate::EtcdBackend::stats`].

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;

/// What every request needs: the client, the time limit, and the counters.
#[derive(Clone)]
pub(crate) struct Conn {
    pub client: Client,
    pub limit: Duration,
    pub stats: Arc<Stats>,
}

/// Requests a backend has sent (see [`crate::EtcdBackend::stats`]).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub txns: AtomicU64,
    pub keep_alives: AtomicU64,
    pub watch_requests: AtomicU64,
}
