//! Where a lock lives in the ZooKeeper tree, and how its contenders are named and ordered —
//! exactly as Apache Curator's `InterProcessMutex` does it, so both exclude each other.
//!
//! ```text
//! <namespace>/<LockName::encoded()>/_c_<uuid>-lock-<10-digit sequence>
//! ```
//!
//! Curator builds the same name: `LockInternals` creates `ZKPaths.makePath(path, "lock-")` in
//! EPHEMERAL_SEQUENTIAL mode `withProtection()`, and `ProtectedUtils` puts `_c_<uuid>-` in front
//! of the node name. Contenders are ordered by Curator's `StandardLockInternalsDriver.fixForSorting`:
//! the part after the last `lock-` (the zero-padded sequence), compared as a string.

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

/// Curator's sort key (`StandardLockInternalsDriver.standardFixForSorting`): what follows the last
/// `lock-`, or the whole name if there is none.
pub(crate) fn sort_key(child: &str) -> &str {
    match child.rfind(LOCK_NAME) {
        Some(i) => &child[i + LOCK_NAME.len()..],
        None => child,
    }
}

/// The children of a lock node in queue order: the first holds the lock.
pub(crate) fn sorted(mut children: Vec<String>) -> Vec<String> {
    children.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
    children
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
        let order: Vec<&str> = sorted.iter().map(|c| sort_key(c)).collect();
        assert_eq!(order, ["0000000001", "0000000003", "0000000010"]);
    }

    #[test]
    fn ancestors() {
        assert_eq!(ancestors_and_self("/a/b/c"), ["/a", "/a/b", "/a/b/c"]);
        assert_eq!(ancestors_and_self("/a"), ["/a"]);
    }
}
