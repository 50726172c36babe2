//! Reaching the servers: what connecting checks ([`admit`]: TLS spoken, no eviction), one [`node::Node`] per logical server (a server, the master the
//! sentinels name, or a cluster) with its [`link`] (the connections, per topology), the
//! [`call`] of one script, a cluster's [`slots`], running a request on every server at once ([`fanout`]), and what every
//! waiter and clean-up task shares ([`inner`]: the parsed URL and the nodes).

pub(crate) mod admit;
pub(crate) mod call;
pub(crate) mod fanout;
pub(crate) mod inner;
pub(crate) mod link;
pub(crate) mod node;
pub(crate) mod slots;
