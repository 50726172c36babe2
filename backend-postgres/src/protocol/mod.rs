//! The protocol of the PostgreSQL backend. Every kind (mutex, semaphore permits, read-write locks,
//! leadership) is one queue of rows, and who holds is the shared queue rule, so there is one wait
//! loop for all of them rather than `exclusive.rs`/`shared.rs` files:
//!
//! - `queue.rs`: the steps on a queue (join, turn, try, leave), each inside one transaction;
//! - `wait.rs`: `try_acquire` and `acquire` (join, wait to be woken, take a turn);
//! - `election.rs`: who leads, and observing it.

pub(crate) mod election;
pub(crate) mod queue;
pub(crate) mod wait;
