//! Wake-ups pushed by etcd: one watch stream per session ([`watch::WatchHub`]), run by the task
//! in [`hub`]; a waiter watches only its predecessor's delete.

pub(crate) mod hub;
pub(crate) mod watch;
