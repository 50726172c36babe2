//! The protocol of the file backend. Every kind (mutex, semaphore permits, read-write locks,
//! leadership) is one queue in one state file, and who holds is the shared queue rule, so there is
//! one wait loop for all of them rather than `exclusive.rs`/`shared.rs` files:
//!
//! - `state.rs`: what a state file holds, and which entries are dead;
//! - `json.rs`: a state's JSON, written by hand (serde's bytes, fewer instructions);
//! - `queue.rs`: the steps on a queue, each inside one transaction;
//! - `wait.rs`: `try_acquire` and `acquire` (join, wait to be woken, take a turn);
//! - `election.rs`: who leads, and observing it.

pub(crate) mod election;
pub(crate) mod json;
pub(crate) mod queue;
pub(crate) mod state;
pub(crate) mod wait;
