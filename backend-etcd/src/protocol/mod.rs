//! The lock protocol on etcd: the one-round-trip requests every kind uses ([`requests`]), what
//! the attempts of every kind share ([`attempt`]), the exclusive kinds (mutex, writer,
//! leadership: [`exclusive`]), the shared ones (permits, readers: [`shared`], over [`line`]), what
//! a queue key's value says ([`kinds`]), the Go layout's in-process slots ([`slots`]) and
//! elections ([`election`]).

pub(crate) mod attempt;
pub(crate) mod election;
pub(crate) mod exclusive;
pub(crate) mod kinds;
pub(crate) mod line;
pub(crate) mod requests;
pub(crate) mod shared;
pub(crate) mod slots;
