//! The one grant rule of every lock kind, for backends that keep a lock's holders and waiters in
//! one queue in arrival order (etcd's keys by create revision, ZooKeeper's sequential nodes, the
//! in-process store) and decide on the client who holds.
//!
//! An entry's [`Role`] says how it shares the lock:
//!
//! | role | holds when | otherwise waits until |
//! |---|---|---|
//! | [`Role::Exclusive`] (mutex, writer, leader) | it is first | the entry just ahead of it is gone |
//! | [`Role::Shared`] (reader) | no exclusive entry is ahead of it | the nearest exclusive entry ahead is gone |
//! | [`Role::Permit`]`(n)` (semaphore) | fewer than `n` entries are ahead of it | see below |
//!
//! So waiting is FIFO, a waiting writer makes the readers behind it wait (no writer starvation),
//! and each waiter watches one entry, never the whole queue: a release wakes one waiter (or the
//! run of readers behind a writer, who all get in).
//!
//! Semaphores: the first waiter (`n` entries ahead) holds as soon as *any* entry ahead of it goes,
//! so it watches them all ([`Standing::AfterAny`]: a range watch on etcd, a children watch on
//! ZooKeeper); every later waiter watches the entry just ahead of it. A waiter that becomes a
//! holder after waiting must then *touch* its own entry (etcd: put its key again; ZooKeeper: set
//! its data), so that the waiter behind it, which watches it, learns that it is now the first
//! waiter. Fencing tokens follow arrival (a create revision, a `czxid`), which is grant order.

use crate::error::{LockError, Result};
use crate::lease::Role;

/// Where one entry of a queue stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// It holds the lock.
    Holds,
    /// It waits until the entry at this index is gone — or, on a semaphore, until that entry
    /// (a waiter too) holds, which it says by touching its entry.
    After(usize),
    /// A semaphore's first waiter: it holds once any entry ahead of it is gone.
    AfterAny,
}

/// Where the entry at index `me` of `queue` (every entry's role, in arrival order) stands.
///
/// [`LockError::InvalidOption`] when `me` is a semaphore permit and an entry ahead of it asked for
/// another permit count: the holders of one semaphore must agree on it (the entry should be
/// removed, and the error returned to its caller; the entries ahead are not affected).
///
/// # Errors
///
/// [`LockError::InvalidOption`] for a semaphore permit count that disagrees with an entry ahead
/// (as above); [`LockError::Protocol`] when `me` is not an index of `queue`.
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith;
/// use locksmith::driver::{queue::{standing, Standing}, Role};
/// let queue = [Role::Shared, Role::Shared, Role::Exclusive, Role::Shared];
/// assert_eq!(standing(&queue, 1)?, Standing::Holds); // readers share
/// assert_eq!(standing(&queue, 3)?, Standing::After(2)); // behind the waiting writer
/// # Ok::<(), locksmith::LockError>(())
/// ```
pub fn standing(queue: &[Role], me: usize) -> Result<Standing> {
    let ahead = &queue[..me.min(queue.len())];
    match queue.get(me).copied() {
        None => Err(LockError::Protocol(format!(
            "queue entry {me} of {} is missing",
            queue.len()
        ))),
        Some(Role::Exclusive) => Ok(if me == 0 {
            Standing::Holds
        } else {
            Standing::After(me - 1)
        }),
        Some(Role::Shared) => Ok(match ahead.iter().rposition(|r| *r != Role::Shared) {
            None => Standing::Holds,
            Some(writer) => Standing::After(writer),
        }),
        Some(Role::Permit(n)) => {
            if let Some(other) = ahead.iter().find_map(|r| match r {
                Role::Permit(m) if *m != n => Some(*m),
                _ => None,
            }) {
                return Err(permit_mismatch(other, n));
            }
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            Ok(match me {
                m if m < n => Standing::Holds,
                m if m == n => Standing::AfterAny,
                m => Standing::After(m - 1),
            })
        }
    }
}

/// Whether a new entry with `role`, joining at the tail of `queue`, would hold at once: what
/// `try_acquire` answers (the semaphore count is checked as by [`standing`]).
///
/// # Errors
///
/// [`LockError::InvalidOption`] for a semaphore permit count that disagrees with an entry of
/// `queue`, as [`standing`].
pub fn holds_at_tail(queue: &[Role], role: Role) -> Result<bool> {
    let mut all = queue.to_vec();
    all.push(role);
    Ok(standing(&all, queue.len())? == Standing::Holds)
}

/// The error for a semaphore request of `asked` permits when `held` are in use.
pub fn permit_mismatch(held: u32, asked: u32) -> LockError {
    LockError::InvalidOption(format!(
        "this semaphore is in use with {held} permits, not {asked}: every holder of a semaphore must \
         ask for the same number of permits"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Role::*;
    use Standing::*;

    fn all(queue: &[Role]) -> Vec<Standing> {
        (0..queue.len()).map(|i| standing(queue, i).unwrap()).collect()
    }

    #[test]
    fn exclusive_entries_hold_one_at_a_time() {
        assert_eq!(all(&[Exclusive, Exclusive, Exclusive]), [Holds, After(0), After(1)]);
    }

    #[test]
    fn readers_share_and_a_waiting_writer_blocks_later_readers() {
        assert_eq!(all(&[Shared, Shared]), [Holds, Holds]);
        assert_eq!(
            all(&[Shared, Shared, Exclusive, Shared, Shared, Exclusive, Shared]),
            [Holds, Holds, After(1), After(2), After(2), After(4), After(5)]
        );
        assert_eq!(all(&[Exclusive, Shared]), [Holds, After(0)]);
    }

    #[test]
    fn permits_hold_up_to_the_count() {
        let q = [Permit(2); 5];
        assert_eq!(all(&q), [Holds, Holds, AfterAny, After(2), After(3)]);
        assert!(matches!(
            standing(&[Permit(3), Permit(2)], 1),
            Err(LockError::InvalidOption(_))
        ));
        // A mismatch behind an entry is not that entry's problem.
        assert_eq!(standing(&[Permit(3), Permit(2)], 0).unwrap(), Holds);
        assert!(holds_at_tail(&[Permit(2)], Permit(2)).unwrap());
        assert!(!holds_at_tail(&[Permit(2), Permit(2)], Permit(2)).unwrap());
        assert!(holds_at_tail(&[Shared], Shared).unwrap());
        assert!(!holds_at_tail(&[Shared, Exclusive], Shared).unwrap());
        assert!(!holds_at_tail(&[Shared], Exclusive).unwrap());
    }
}
