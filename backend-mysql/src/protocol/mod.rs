//! The lock protocol. One queue rule covers every kind (mutexes, permits, readers, writers and
//! candidates), as on PostgreSQL and `file://`, so there is no `exclusive.rs`/`shared.rs`:
//! `queue.rs` holds the steps (enter, try, leave, release, settle), each one transaction on the
//! lock's row, deciding with `locksmith_core::driver::queue::standing`; `call.rs` their common
//! cases in one call of a stored procedure each; `wait.rs` the one wait loop of every kind;
//! `election.rs` who leads, and observing it.

pub(crate) mod call;
pub(crate) mod election;
pub(crate) mod queue;
pub(crate) mod wait;
