//! The connection: one ZooKeeper session ([`session`]), which is the lease of every lock taken
//! through it, and the backend's current session, replaced when it ends ([`sessions`]); the nodes
//! a session still has to delete ([`leftover`]); with `zks://`, what names a TLS failure the
//! client keeps to itself (`tls_check`).

pub(crate) mod leftover;
pub(crate) mod session;
pub(crate) mod sessions;
#[cfg(feature = "tls")]
pub(crate) mod tls_check;
