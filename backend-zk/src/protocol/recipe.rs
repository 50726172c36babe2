//! What one contender creates for each lock kind — the queue it joins, the name and data of its
//! node — and how it reads the other contenders of that queue (their [`Role`]s, for
//! [`locksmith_core::driver::queue::standing`]).

use locksmith_core::driver::{LockRequest, Role};
use locksmith_core::{LockError, LockKind, Result};

use crate::layout;

/// One queue of EPHEMERAL_SEQUENTIAL nodes and the node a contender adds to it.
#[derive(Clone, Debug)]
pub(crate) struct Recipe {
    /// The parent of the queue's nodes.
    pub(crate) parent: String,
    /// The node name after the protected prefix `_c_<uuid>-`: `lock-`, `__READ__`, `latch-` ...
    pub(crate) base: String,
    /// The node's data: the candidate's value of an election (Curator's `LeaderLatch` keeps its
    /// participant id there), `locksmith pid=<pid>` for operators otherwise.
    pub(crate) data: Vec<u8>,
    /// How a child of [`Recipe::parent`] shares the lock.
    pub(crate) role_of: fn(&str) -> Role,
}

impl Recipe {
    /// The queue a mutex, read, write or leadership request joins under `namespace`. Semaphores
    /// have two queues ([`Recipe::semaphore_lock`], [`Recipe::semaphore_lease`]).
    pub(crate) fn for_request(namespace: &str, req: &LockRequest) -> Result<Recipe> {
        let parent = layout::family_path(namespace, req.kind.family(), &req.name);
        let (base, data, role_of): (&str, Vec<u8>, fn(&str) -> Role) = match &req.kind {
            LockKind::Mutex => (layout::LOCK_NAME, pid_data(), layout::exclusive),
            LockKind::Read => (layout::READ_NAME, pid_data(), layout::rwlock_role),
            LockKind::Write => (layout::WRITE_NAME, pid_data(), layout::rwlock_role),
            LockKind::Leader { value } => (layout::LATCH_NAME, value.as_bytes().to_vec(), layout::exclusive),
            other => {
                return Err(LockError::InvalidOption(format!(
                    "zk has no single queue for a {}",
                    other.family().name()
                )))
            }
        };
        Ok(Recipe {
            parent,
            base: base.to_owned(),
            data,
            role_of,
        })
    }

    /// A semaphore's internal lock (Curator: an `InterProcessMutex` on `<semaphore>/locks`), whose
    /// nodes carry the permit count: `_c_<uuid>-p<N>-lock-<seq>`.
    pub(crate) fn semaphore_lock(semaphore: &str, permits: u32) -> Recipe {
        Recipe {
            parent: layout::child_path(semaphore, layout::SEMAPHORE_LOCKS),
            base: layout::with_permits(permits, layout::LOCK_NAME),
            data: pid_data(),
            role_of: layout::exclusive,
        }
    }

    /// A semaphore's leases (Curator: `<semaphore>/leases/_c_<uuid>-lease-<seq>`), ours with the
    /// permit count: `_c_<uuid>-p<N>-lease-<seq>`. Every lease counts, whatever its role: the
    /// semaphore code counts them itself.
    pub(crate) fn semaphore_lease(semaphore: &str, permits: u32) -> Recipe {
        Recipe {
            parent: layout::child_path(semaphore, layout::SEMAPHORE_LEASES),
            base: layout::with_permits(permits, layout::LEASE_NAME),
            data: pid_data(),
            role_of: layout::exclusive,
        }
    }
}

/// `locksmith pid=<pid>`: who created a node, for operators.
fn pid_data() -> Vec<u8> {
    format!("locksmith pid={}", std::process::id()).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use locksmith_core::driver::LockName;
    use std::time::Duration;

    fn req(kind: LockKind) -> LockRequest {
        LockRequest {
            name: LockName::new("a/b").unwrap(),
            ttl: Duration::from_secs(10),
            kind,
        }
    }

    #[test]
    fn each_kind_joins_its_curator_queue() {
        let mutex = Recipe::for_request("/ns", &req(LockKind::Mutex)).unwrap();
        assert_eq!((mutex.parent.as_str(), mutex.base.as_str()), ("/ns/a%2Fb", "lock-"));
        let read = Recipe::for_request("/ns", &req(LockKind::Read)).unwrap();
        assert_eq!((read.parent.as_str(), read.base.as_str()), ("/ns/a%2Fb.rw", "__READ__"));
        let write = Recipe::for_request("/ns", &req(LockKind::Write)).unwrap();
        assert_eq!(
            (write.parent.as_str(), write.base.as_str()),
            ("/ns/a%2Fb.rw", "__WRIT__")
        );
        let leader = Recipe::for_request("/ns", &req(LockKind::Leader { value: "me:1".into() })).unwrap();
        assert_eq!(
            (leader.parent.as_str(), leader.base.as_str()),
            ("/ns/a%2Fb.elect", "latch-")
        );
        assert_eq!(leader.data, b"me:1");
        assert!(Recipe::for_request("/ns", &req(LockKind::Permit { permits: 2 })).is_err());
        let lock = Recipe::semaphore_lock("/ns/a%2Fb.sem", 2);
        assert_eq!(
            (lock.parent.as_str(), lock.base.as_str()),
            ("/ns/a%2Fb.sem/locks", "p2-lock-")
        );
        let lease = Recipe::semaphore_lease("/ns/a%2Fb.sem", 2);
        assert_eq!(
            (lease.parent.as_str(), lease.base.as_str()),
            ("/ns/a%2Fb.sem/leases", "p2-lease-")
        );
    }
}
