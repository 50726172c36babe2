//! The lock protocol on ZooKeeper: one contender in a queue of EPHEMERAL_SEQUENTIAL nodes for
//! every kind ([`contender`]), what it creates for each kind ([`recipe`]), one try at any kind
//! ([`take`]), Curator's semaphore ([`semaphore`]) and elections ([`election`]).

pub(crate) mod contender;
pub(crate) mod election;
pub(crate) mod recipe;
pub(crate) mod semaphore;
pub(crate) mod take;
