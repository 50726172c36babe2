//! Where each lock lives in the ZooKeeper tree, and how its contenders are named and ordered —
//! exactly as Apache Curator's recipes do it, so that Curator clients and locksmith share them.
//!
//! ```text
//! <namespace>/<encoded>/_c_<uuid>-lock-<seq>                 mutex        (InterProcessMutex)
//! <namespace>/<encoded>.rw/_c_<uuid>-__READ__<seq>           read side    (InterProcessReadWriteLock)
//! <namespace>/<encoded>.rw/_c_<uuid>-__WRIT__<seq>           write side
//! <namespace>/<encoded>.sem/locks/_c_<uuid>-p<N>-lock-<seq>  semaphore    (InterProcessSemaphoreV2:
//! <namespace>/<encoded>.sem/leases/_c_<uuid>-p<N>-lease-<seq>              internal lock and leases)
//! <namespace>/<encoded>.elect/_c_<uuid>-latch-<seq>          election     (LeaderLatch)
//! ```
//!
//! Curator builds the same names: its recipes create `ZKPaths.makePath(path, <base name>)` in
//! EPHEMERAL_SEQUENTIAL mode `withProtection()`, and `ProtectedUtils` puts `_c_<uuid>-` in front
//! of the node name. Contenders are ordered by their sequence number, the 10 digits ZooKeeper
//! appends from the parent's counter, whatever their prefix (see [`sorted`]). A semaphore's nodes
//! carry its permit count after the protected prefix (`p<N>-`), where Curator's recipes, which
//! only look at what follows the last `lock-` or count the leases, do not see it.

use locksmith_core::driver::{LockName, Role};
use locksmith_core::Family;

/// Curator's lock node name for `InterProcessMutex` (`InterProcessMutex.LOCK_NAME`), also the
/// name of the nodes of a semaphore's internal lock.
pub(crate) const LOCK_NAME: &str = "lock-";

/// Curator's read-lock node name (`InterProcessReadWriteLock.READ_LOCK_NAME`).
pub(crate) const READ_NAME: &str = "__READ__";

/// Curator's write-lock node name (`InterProcessReadWriteLock.WRITE_LOCK_NAME`).
pub(crate) const WRITE_NAME: &str = "__WRIT__";

/// kazoo's read-lock node name (`ReadLock._NODE_NAME`): also a reader.
const KAZOO_READ_NAME: &str = "__rlock__";

/// Curator's semaphore: the internal lock's node (`InterProcessSemaphoreV2.LOCK_PARENT`) ...
pub(crate) const SEMAPHORE_LOCKS: &str = "locks";

/// ... the leases' node (`LEASE_PARENT`) ...
pub(crate) const SEMAPHORE_LEASES: &str = "leases";

/// ... and a lease's node name (`LEASE_BASE_NAME`).
pub(crate) const LEASE_NAME: &str = "lease-";

/// Curator's `LeaderLatch` node name (`LeaderLatch.LOCK_NAME`).
pub(crate) const LATCH_NAME: &str = "latch-";

/// Curator's protected-name prefix (`ProtectedUtils.PROTECTED_PREFIX`).
const PROTECTED_PREFIX: &str = "_c_";

/// The node of `name` in `family`: `<namespace>/<encoded name><family suffix>`. For a mutex, a
/// read-write lock and an election it is the parent of the contenders; a semaphore has its
/// [`SEMAPHORE_LOCKS`] and [`SEMAPHORE_LEASES`] nodes under it.
pub(crate) fn family_path(namespace: &str, family: Family, name: &LockName) -> String {
    format!("{namespace}/{}", family.segment(name))
}

/// The mutex's lock node (the parent of its contenders): `<namespace>/<encoded name>`.
pub(crate) fn lock_path(namespace: &str, name: &LockName) -> String {
    family_path(namespace, Family::Mutex, name)
}

/// The start of the name of every node one contender creates: `_c_<uuid>-`. Finding a child with
/// this prefix finds the node a create that failed with a connection loss may have made anyway.
pub(crate) fn protected_marker(uuid: &str) -> String {
    format!("{PROTECTED_PREFIX}{uuid}-")
}

/// How many contenders own `children` (node names): a protected node counts once per uuid (a
/// semaphore waiter has a node in the internal lock and one in the leases), any other node once.
pub(crate) fn contenders<'a>(children: impl IntoIterator<Item = &'a String>) -> usize {
    let mut seen = std::collections::HashSet::new();
    children
        .into_iter()
        .filter(|child| {
            let owner = child
                .strip_prefix(PROTECTED_PREFIX)
                .and_then(|rest| rest.get(..36))
                .unwrap_or(child.as_str());
            seen.insert(owner.to_owned())
        })
        .count()
}

/// The path given to the EPHEMERAL_SEQUENTIAL create: `<parent>/_c_<uuid>-<base>` (`base` is
/// `lock-`, `__READ__`, `latch-` ...); the server appends the sequence number.
pub(crate) fn contender_prefix(parent: &str, uuid: &str, base: &str) -> String {
    format!("{parent}/{}{base}", protected_marker(uuid))
}

/// The base name of a semaphore's node: `p<permits>-<base>` (`p3-lock-`, `p3-lease-`).
pub(crate) fn with_permits(permits: u32, base: &str) -> String {
    format!("p{permits}-{base}")
}

/// The permit count a locksmith semaphore node carries (`_c_<uuid>-p<N>-...`); `None` for a node
/// of another client (Curator's `_c_<uuid>-lease-...` carries none).
pub(crate) fn permits_of(child: &str) -> Option<u32> {
    let rest = child.strip_prefix(PROTECTED_PREFIX)?;
    let rest = rest.get(UUID_LEN..)?.strip_prefix("-p")?;
    let (digits, _) = rest.split_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The length of the uuid in a protected name (`8-4-4-4-12` hex digits).
const UUID_LEN: usize = 36;

/// How a child of a read-write lock's node shares it: Curator's `__READ__` and kazoo's
/// `__rlock__` nodes are readers; every other contender (`__WRIT__`, kazoo's `__lock__`, anything
/// unknown) is exclusive, the safe reading.
pub(crate) fn rwlock_role(child: &str) -> Role {
    if child.contains(READ_NAME) || child.contains(KAZOO_READ_NAME) {
        Role::Shared
    } else {
        Role::Exclusive
    }
}

/// The role of every contender of a mutex, an election or a semaphore's internal lock.
pub(crate) fn exclusive(_child: &str) -> Role {
    Role::Exclusive
}

/// A child's full path.
pub(crate) fn child_path(lock_path: &str, child: &str) -> String {
    format!("{lock_path}/{child}")
}

/// The sequence number ZooKeeper appended to a sequential child's name: its last 10 characters
/// (`%010d` of the parent's counter), whatever the prefix. `None` for a name that does not end in
/// one. (The counter is a signed 32-bit integer: past 2^31 creations under one lock node it turns
/// negative, `-000000001`, and the order breaks, as in every ZooKeeper recipe; a lock node is
/// re-created, and its counter reset, whenever it was empty for a while.) Such a sign follows a
/// recipe's base, which ends in a separator (`lock-`, `__lock__`): a `-` right after a letter or a
/// digit belongs to a name (a nested lock node `order-123456789` is no contender numbered
/// −123456789, first in every queue).
pub(crate) fn sequence(child: &str) -> Option<i64> {
    let at = child.len().checked_sub(10)?;
    let tail = child.get(at..)?;
    let digits = match tail.strip_prefix('-') {
        Some(_) if child[..at].chars().next_back().is_some_and(char::is_alphanumeric) => return None,
        Some(digits) => digits,
        None => tail,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    tail.parse().ok()
}

/// The contenders among the children of a lock node, in queue order: the first holds the lock.
///
/// Every sequential child counts, ordered by its sequence number alone, whatever its prefix:
/// locksmith's and Curator's `_c_<uuid>-lock-`, kazoo's `<uuid>__lock__`, go-zookeeper's and any
/// other recipe's. (Ordering by the whole name, or by what follows `lock-` as Curator does, puts
/// another recipe's nodes after ours and lets a second holder in.) A child without a sequence
/// number is no contender of any recipe — another client's nested lock node, say — and is left
/// out, as kazoo leaves it out; otherwise a persistent one would block the lock for good.
pub(crate) fn sorted(children: Vec<String>) -> Vec<String> {
    let mut contenders: Vec<(i64, String)> = children
        .into_iter()
        .filter_map(|c| sequence(&c).map(|seq| (seq, c)))
        .collect();
    contenders.sort();
    contenders.into_iter().map(|(_, c)| c).collect()
}

/// Every ancestor of `path` and `path` itself, outermost first: `/a`, `/a/b`, `/a/b/c`.
pub(crate) fn ancestors_and_self(path: &str) -> Vec<&str> {
    path.match_indices('/')
        .skip(1)
        .map(|(i, _)| &path[..i])
        .chain(std::iter::once(path))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curator_compatible_names_and_order() {
        let name = LockName::new("orders/42").unwrap();
        let lock = lock_path("/locksmith", &name);
        assert_eq!(lock, "/locksmith/orders%2F42");
        let uuid = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
        assert_eq!(
            contender_prefix(&lock, uuid, LOCK_NAME),
            format!("{lock}/_c_{uuid}-lock-")
        );
        let children = vec![
            "_c_ffffffff-9423-4e0c-a7b5-9f819e3ec2e1-lock-0000000003".to_owned(),
            "_c_00000000-9423-4e0c-a7b5-9f819e3ec2e1-lock-0000000010".to_owned(),
            "_c_aaaaaaaa-9423-4e0c-a7b5-9f819e3ec2e1-lock-0000000001".to_owned(),
        ];
        let sorted = sorted(children);
        let order: Vec<Option<i64>> = sorted.iter().map(|c| sequence(c)).collect();
        assert_eq!(order, [Some(1), Some(3), Some(10)]);
    }

    #[test]
    fn every_recipe_is_ordered_by_its_sequence_number() {
        let kazoo = "514e5a831836450cb1a56c741e990fd8__lock__0000000002".to_owned();
        let kazoo_read = "514e5a831836450cb1a56c741e990fd9__rlock__0000000005".to_owned();
        let ours = "_c_8eb60557-ba51-e0da-67ee-fc47467d3f34-lock-0000000003".to_owned();
        let curator_write = "_c_8eb60557-ba51-e0da-67ee-fc47467d3f35-__WRIT__0000000004".to_owned();
        let plain = "lock-0000000001".to_owned();
        let sorted = sorted(vec![
            ours.clone(),
            kazoo_read.clone(),
            kazoo.clone(),
            curator_write.clone(),
            plain.clone(),
        ]);
        assert_eq!(sorted, [plain, kazoo, ours, curator_write, kazoo_read]);
        // A child that is not sequential is nobody's contender (a nested lock node, say).
        assert_eq!(
            sorted_first(vec!["nested".into(), "_c_x-lock-0000000001".into()]),
            "_c_x-lock-0000000001"
        );
        assert_eq!(sequence("x"), None);
        assert_eq!(sequence("lock-000000000x"), None);
    }

    /// Bug: a nested lock node whose name ends in `-` and nine digits (another namespace's lock
    /// `invoice-123456789` under `zk://h/apps/billing`, inside the lock node of `billing` in
    /// `zk://h/apps`) was read as a contender numbered −123456789: first in the queue, it held
    /// the lock for as long as it existed. A negative counter follows a separator only.
    #[test]
    fn a_name_ending_in_a_dash_and_digits_is_no_contender() {
        assert_eq!(
            sorted_first(vec!["invoice-123456789".into(), "_c_x-lock-0000000001".into()]),
            "_c_x-lock-0000000001"
        );
        assert_eq!(sequence("invoice-123456789"), None);
        assert_eq!(sequence("v2-123456789"), None);
        // A counter past 2^31, after a recipe's base.
        assert_eq!(sequence("_c_x-lock--000000001"), Some(-1));
        assert_eq!(sequence("0a1b__lock__-000000002"), Some(-2));
        assert_eq!(sequence("-000000003"), Some(-3));
    }

    fn sorted_first(children: Vec<String>) -> String {
        sorted(children).remove(0)
    }

    #[test]
    fn family_paths_and_curator_names() {
        let name = LockName::new("jobs/a").unwrap();
        assert_eq!(family_path("/ns", Family::RwLock, &name), "/ns/jobs%2Fa.rw");
        assert_eq!(family_path("/ns", Family::Semaphore, &name), "/ns/jobs%2Fa.sem");
        assert_eq!(family_path("/ns", Family::Election, &name), "/ns/jobs%2Fa.elect");
        assert_eq!(family_path("/ns", Family::Mutex, &name), lock_path("/ns", &name));
        let uuid = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
        assert_eq!(rwlock_role(&format!("_c_{uuid}-{READ_NAME}0000000001")), Role::Shared);
        assert_eq!(
            rwlock_role(&format!("_c_{uuid}-{WRITE_NAME}0000000002")),
            Role::Exclusive
        );
        assert_eq!(rwlock_role("0a1b__rlock__0000000003"), Role::Shared);
        assert_eq!(rwlock_role("0a1b__lock__0000000004"), Role::Exclusive);
    }

    #[test]
    fn permit_counts_in_names() {
        let uuid = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
        let ours = format!("_c_{uuid}-{}0000000007", with_permits(3, LEASE_NAME));
        assert_eq!(ours, format!("_c_{uuid}-p3-lease-0000000007"));
        assert_eq!(permits_of(&ours), Some(3));
        assert_eq!(permits_of(&format!("_c_{uuid}-p10000-lock-0000000001")), Some(10_000));
        // Curator's nodes carry no count; malformed ones are nobody's count.
        assert_eq!(permits_of(&format!("_c_{uuid}-lease-0000000007")), None);
        assert_eq!(permits_of(&format!("_c_{uuid}-p-lease-0000000007")), None);
        assert_eq!(permits_of(&format!("_c_{uuid}-px-lease-0000000007")), None);
        assert_eq!(permits_of("_c_short-p3-lease-0000000007"), None);
        assert_eq!(permits_of("p3-lease-0000000007"), None);
        assert_eq!(permits_of(&format!("_c_{uuid}-p99999999999-lease-0000000007")), None);
    }

    #[test]
    fn ancestors() {
        assert_eq!(ancestors_and_self("/a/b/c"), ["/a", "/a/b", "/a/b/c"]);
        assert_eq!(ancestors_and_self("/a"), ["/a"]);
    }
}
