//! The backend author's API: what a backend crate implements and calls, kept apart from what an
//! application uses (the crate root), as `sqlx` keeps its driver API apart from its user API.
//!
//! An application never needs this module: it connects with `locksmith::connect` (or builds a
//! [`crate::Locker`] over a [`crate::MemoryBackend`]) and works with lockers, builders and guards.
//! A backend implements [`LockBackend`] for its server and exposes a [`Descriptor`];
//! `docs/backend-guide.md` in the repository is the step-by-step template (files, descriptor,
//! conformance suite, test servers, benchmark and fault-suite rows).
//!
//! | item | what a backend does with it |
//! |---|---|
//! | [`LockBackend`], [`macro@async_trait`] | implements it: acquire, try, release, renew, inspect, list, shutdown |
//! | [`LockRequest`], [`Lease`], [`Role`] | receives a request; returns the lease it granted; a lease's role among holders |
//! | [`LostSignal`] | fires it when the server took a lock back |
//! | [`LockName`] | encodes the validated name into its keys or paths |
//! | [`Descriptor`], [`Connecting`], [`TtlScope`] | describes itself to the facade: schemes, URL options, connect |
//! | [`BackendUrl`], [`url`] | parses its URL and options with the shared parsers |
//! | [`queue`] | computes waiters' standing in a FIFO queue the same way on every backend |
//! | [`Outage`], [`sleep_until_deadline`] | tracks a connection outage for the deadlines every backend keeps; sleeps until a deadline, if any |
//! | [`cleanup`] | spawns background clean-up that `Locker::shutdown` and failed calls wait for |
//! | [`in_caller`] | runs a request that holds the locker's one connection in its caller's task, and hands it off into a task of its own when its caller stops polling it |
//! | [`armed`] | the drop-armed guard of what an acquire left on the server: [`armed::Armed`] over the backend's [`armed::CleanUp`] |
//! | [`retry`] | tries a clean-up (or a request that never reached the server) again while its error can heal: [`retry::Backoff`], [`retry::retry`] |
//! | [`GuardedWrite`], [`refuse_if_inside`], [`data_key_under`] | applies a guarded write atomically with its lease check; refuses keys of its own namespace; names a lock's data keys |
//! | [`observe`] | observes an election by reading it again on each change (backends told *that* it changed) |
//! | `tls` (feature `tls`) | installs the one crypto provider; builds the rustls client configuration from a URL's `ca=`, `cert=`, `key=` |
//! | [`permanent`] | tells TLS failures that cannot heal (no TLS on the server, an untrusted, misnamed or expired certificate, a refused client certificate) from an outage: `Denied`, not `Unavailable` |
//!
//! The shared conformance suite a backend must pass is [`crate::conformance`] (feature
//! `conformance`, for the backend's tests).

pub mod armed;
pub mod cleanup;
pub mod fast_hash;
pub mod in_caller;
pub mod observe;
pub mod permanent;
pub mod queue;
pub mod retry;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub mod tls;
pub mod url;

pub use crate::backend::{LockBackend, DEFAULT_REQUEST_TIMEOUT};
pub use crate::descriptor::{Connecting, Descriptor, TtlScope};
pub use crate::error::text_with_sources;
pub use crate::guarded::{data_key_under, refuse_if_inside, validate_key, GuardedWrite};
pub use crate::lease::{Lease, LockRequest, LostSignal, Role};
pub use crate::name::LockName;
pub use crate::outage::{sleep_until_deadline, Outage};
pub use url::BackendUrl;

/// Re-exported so backends implement [`LockBackend`] with the same macro version.
pub use async_trait::async_trait;
