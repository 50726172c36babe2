//! What the crate's own tests share: a backend with a session lease, and a key of that lease
//! written straight to the server (as a granted lock's).

use etcd_client::PutOptions;
use locksmith_core::conformance::unique_name;
use locksmith_core::driver::BackendUrl;

use crate::conn::session::LeaseRef;
use crate::{Config, EtcdBackend};

/// A session's key on the server, and what wrote it.
pub(crate) struct SessionKey {
    /// The backend, connected with `url`.
    pub backend: EtcdBackend,
    /// A client straight to the server, beside the backend.
    pub direct: etcd_client::Client,
    /// The session's lease.
    pub lease: LeaseRef,
    /// `<prefix>/<unique name>`, attached to the lease.
    pub key: String,
    /// The key's create revision.
    pub rev: i64,
}

/// Connects a backend with `url` and, through a client straight to `upstream`, writes a key of
/// its session lease under `prefix`.
pub(crate) async fn session_key(url: &str, upstream: &str, prefix: &str) -> SessionKey {
    let url = BackendUrl::parse(url).expect("url");
    let backend = EtcdBackend::connect(Config::from_url(&url).expect("config"))
        .await
        .expect("connect");
    let lease = backend.session().current().await.expect("lease");
    let mut direct = etcd_client::Client::connect([upstream], None)
        .await
        .expect("direct client");
    let key = format!("{prefix}/{}", unique_name(prefix));
    let put = direct
        .put(key.as_str(), "", Some(PutOptions::new().with_lease(lease.id)))
        .await
        .expect("put");
    let rev = put.header().map(|h| h.revision()).expect("revision");
    SessionKey {
        backend,
        direct,
        lease,
        key,
        rev,
    }
}
