//! The lock protocol: what each request says to Redis and what its answer means. Every lock kind
//! is a FIFO queue on the server whose every state change is one Lua script (`src/lua/`), and
//! every kind waits in the same loop.
//!
//! - [`wait`]: the one wait loop (try, subscribe, step, sleep until woken) and the one attempt,
//!   for every kind, over an [`entry::Entry`];
//! - [`entry`]: what a kind supplies to it (try, step, leave, release), and what they share;
//! - [`mutex`]: the mutex's entry (one lock key; `lua/mutex/`);
//! - [`kinds`]: semaphores', read-write locks' and elections' entry (holders in a sorted set;
//!   `lua/kinds/`);
//! - [`election`]: who leads, and observing it;
//! - [`quorum`]: the mutex on several independent masters (Redlock), over the mutex's entry;
//! - [`scripts`]: the scripts, assembled from `src/lua/` with the URL's settings;
//! - [`library`]: the same scripts as a Redis 7 function library (`FCALL`), each kept as a plain
//!   script (`EVALSHA`) too;
//! - [`lua`]: reading the `.lua` files and the helpers a piece of code calls.

pub(crate) mod election;
pub(crate) mod entry;
pub(crate) mod kinds;
pub(crate) mod library;
pub(crate) mod lua;
pub(crate) mod mutex;
pub(crate) mod quorum;
#[cfg(test)]
mod script_tests;
pub(crate) mod scripts;
pub(crate) mod wait;
