//! Where a lock lives in the ZooKeeper tree, and how its contenders are named and ordered —
//! exactly as Apache Curator's `InterProcessMutex` does it, so both exclude each other.
//!
//! ```text
//! <namespace>/<LockName::encoded()>/_c_<uuid>-lock-<10-digit sequence>
//! ```
//!
//! Curator builds the same name: `LockInternals` creates `ZKPaths.makePath(path, "lock-")` in
//! EPHEMERAL_SEQUENTIAL mode `withProtection()`, and `ProtectedUtils` puts `_c_<uuid>-` in front
//! of the node name. Contenders are ordered by their sequence number, the 10 digits ZooKeeper
//! appends from the parent's counter, whatever their prefix (see [`sorted`]).

use lockcore::LockName;

/// Curator's lock node name for `InterProcessMutex` (`InterProcessMutex.LOCK_NAME`).
pub(crate) const LOCK_NAME: &str = "lock-";

/// Curator's protected-name prefix (`ProtectedUtils.PROTECTED_PREFIX`).
const PROTECTED_PREFIX: &str = "_c_";

/// The lock node (the parent of the lock's contenders): `<namespace>/<encoded name>`.
pub(crate) fn lock_path(namespace: &str, name: &LockName) -> String {
    format!("{namespace}/{}", name.encoded())
}

/// The start of the name of every node one contender creates: `_c_<uuid>-`. Finding a child with
/// this prefix finds the node a create that failed with a connection loss may have made anyway.
pub(crate) fn protected_marker(uuid: &str) -> String {
    format!("{PROTECTED_PREFIX}{uuid}-")
}

/// The path given to the EPHEMERAL_SEQUENTIAL create: `<lock path>/_c_<uuid>-lock-`; the server
/// appends the sequence number.
pub(crate) fn contender_prefix(lock_path: &str, uuid: &str) -> String {
    format!("{lock_path}/{}{LOCK_NAME}", protected_marker(uuid))
}

/// A child's full path.
pub(crate) fn child_path(lock_path: &str, child: &str) -> String {
    format!("{lock_path}/{child}")
}

/// The sequence number ZooKeeper appended to a sequential child's name: its last 10 characters
/// (`%010d` of the parent's counter), whatever the prefix. `None` for a name that does not end in
/// one. (The counter is a signed 32-bit integer: past 2^31 creations under one lock node it turns
/// negative, `-000000001`, and the order breaks, as in every ZooKeeper recipe; a lock node is
/// re-created, and its counter reset, whenever it was empty for a while.)
pub(crate) fn sequence(child: &str) -> Option<i64> {
    let tail = child.len().checked_sub(10).and_then(|i| child.get(i..))?;
    let digits = tail.strip_prefix('-').unwrap_or(tail);
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
        assert_eq!(contender_prefix(&lock, uuid), format!("{lock}/_c_{uuid}-lock-"));
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

    fn sorted_first(children: Vec<String>) -> String {
        sorted(children).remove(0)
    }

    #[test]
    fn ancestors() {
        assert_eq!(ancestors_and_self("/a/b/c"), ["/a", "/a/b", "/a/b/c"]);
        assert_eq!(ancestors_and_self("/a"), ["/a"]);
    }
}
