//! Notifications pushed by ZooKeeper: the watch on every held node that tells its holder the
//! node is gone ([`held`]). A waiter's watch on its predecessor lives with the contender
//! ([`crate::protocol::contender`]).

pub(crate) mod held;
