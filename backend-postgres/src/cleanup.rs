//! The clean-up edge: an entry that an `acquire` or `try_acquire` put in a queue, or may have put
//! there, is taken out when the call ends without returning it as a lease (a timeout, an error,
//! the future dropped).
//!
//! Every step of a locker runs on its one steps' connection, one at a time, and a step dropped
//! part-way is rolled back (or committed) on that connection before the next step starts. So the
//! removal, a step of its own spawned with [`cleanup::spawn`], always runs after any step still in
//! flight: a call given up on never acquires later behind its caller's back.

use std::sync::Arc;
use std::time::Duration;

use lockcore::driver::cleanup;

use crate::conn::Conn;
use crate::protocol::queue::Op;

/// An entry of this call's in a queue: removed when dropped, unless [`Pending::keep`] says the
/// caller now owns it (as a lease) or it was never added.
pub(crate) struct Pending {
    conn: Arc<Conn>,
    segment: String,
    id: String,
    armed: bool,
}

impl Pending {
    /// The entry `id` of lock `segment`.
    pub fn new(conn: &Arc<Conn>, segment: &str, id: &str) -> Pending {
        Pending {
            conn: conn.clone(),
            segment: segment.to_owned(),
            id: id.to_owned(),
            armed: true,
        }
    }

    /// The entry is the caller's now (or was never added): nothing to clean up.
    pub fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (conn, segment, id) = (self.conn.clone(), self.segment.clone(), self.id.clone());
        let spawned = cleanup::spawn(async move {
            let left = conn.step(&segment, Op::Leave(id), Duration::ZERO).await;
            if let Err(e) = left {
                tracing::warn!(lock = %segment, error = %e,
                    "postgres: could not remove a queue entry; it goes when its locker stops beating");
            }
        });
        if !spawned {
            tracing::warn!(lock = %self.segment,
                "postgres: no runtime to remove a queue entry; it goes when its locker stops beating");
        }
    }
}
