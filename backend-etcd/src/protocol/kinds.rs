//! What the value of a queue key says about its entry, for each lock kind.
//!
//! Every kind queues the same way (one key per holder or waiter, ordered by create revision);
//! the value says what the entry is, so that a waiter that reads the queue can tell how the
//! entries ahead of it share the lock ([`locksmith_core::driver::queue::standing`]):
//!
//! | kind | value |
//! |---|---|
//! | mutex | empty (as etcd's Go `Mutex` and `etcdctl lock`) |
//! | semaphore permit | the semaphore's permit count in decimal, e.g. `3` |
//! | read-write lock | `read` or `write` |
//! | election | the campaign value (as etcd's Go `Election` and `etcdctl elect`) |

use locksmith_core::driver::Role;
use locksmith_core::{Family, LockKind, MAX_PERMITS};

/// The value of a reader's key.
const READ: &str = "read";
/// The value of a writer's key.
const WRITE: &str = "write";

/// The value the key of a `kind` entry holds.
pub(crate) fn value_of(kind: &LockKind) -> String {
    match kind {
        LockKind::Permit { permits } => permits.to_string(),
        LockKind::Read => READ.to_owned(),
        LockKind::Write => WRITE.to_owned(),
        // The leader's value; the mutex, and any kind added later: an empty value, like the Go
        // Mutex's.
        _ => kind.campaign_value().to_owned(),
    }
}

/// How the entry whose key holds `value` in a queue of `family` shares the lock.
///
/// A value no client of this crate writes (an operator's or another program's key) counts as an
/// exclusive entry: it then takes a permit of a semaphore and holds back the readers behind it,
/// so a foreign key can delay others but never lets more in than the lock allows.
pub(crate) fn role_of(family: Family, value: &[u8]) -> Role {
    let text = std::str::from_utf8(value).unwrap_or_default();
    let role = match family {
        Family::Semaphore => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_PERMITS).contains(n))
            .map(Role::Permit),
        Family::RwLock if text == READ => Some(Role::Shared),
        Family::RwLock if text == WRITE => Some(Role::Exclusive),
        Family::RwLock => None,
        _ => Some(Role::Exclusive),
    };
    role.unwrap_or_else(|| {
        tracing::warn!(
            family = family.name(),
            value = %String::from_utf8_lossy(value),
            "a queue key with a value locksmith does not write; it counts as an exclusive entry"
        );
        Role::Exclusive
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_to_roles() {
        for kind in [
            LockKind::Permit { permits: 3 },
            LockKind::Read,
            LockKind::Write,
            LockKind::Leader {
                value: "10.0.0.1:80".into(),
            },
            LockKind::Mutex,
        ] {
            let value = value_of(&kind);
            assert_eq!(role_of(kind.family(), value.as_bytes()), kind.role(), "{kind:?}");
        }
        assert_eq!(value_of(&LockKind::Permit { permits: 12 }), "12");
        assert_eq!(value_of(&LockKind::Mutex), "");
    }

    #[test]
    fn foreign_values_are_exclusive() {
        for junk in [&b""[..], b"0", b"10001", b"-1", b" 2", b"\xff"] {
            assert_eq!(role_of(Family::Semaphore, junk), Role::Exclusive, "{junk:?}");
        }
        for junk in [&b""[..], b"READ", b"reader"] {
            assert_eq!(role_of(Family::RwLock, junk), Role::Exclusive, "{junk:?}");
        }
    }
}
