//! Where the keys of a lock live.
//!
//! Every lock is a key prefix; every holder or waiter is one key under it, attached to its
//! session lease. The owner is the key with the lowest create revision under the prefix.

use lockcore::LockName;

/// The key layout of a backend, chosen with the URL option `layout=`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `layout=default`: `<namespace>/<encoded name>/<lease id hex>-<n>`.
    ///
    /// The namespace (the URL path, or `locksmith`) and the name are each encoded into one
    /// segment without `/` ([`LockName::encoded`]), so no lock's prefix is a prefix of another's:
    /// `a`, `a/b`, `ab` and `a/` are independent locks, in any namespace. `n` is the lowest
    /// number no other live attempt of the session on this lock uses, so attempts of one session
    /// never share a key, and a lock taken again reuses the name of its deleted key.
    Default {
        /// The encoded namespace segment.
        namespace: String,
    },
    /// `layout=go-mutex`: exactly the keys of etcd's Go `concurrency.Mutex` and of
    /// `etcdctl lock NAME`: `<prefix>NAME/<lease id hex>`, with the raw name.
    ///
    /// It inherits the Go prefix pitfall: the lock `a` is the prefix `a/`, which also contains
    /// the keys of the lock `a/b`, so a holder or waiter of `a/b` can own or block `a`.
    GoMutex {
        /// Put before every name: empty, or the URL path followed by `/`.
        prefix: String,
    },
}

impl Layout {
    /// The prefix under which all holder and waiter keys of `name` live (ends with `/`).
    pub fn lock_prefix(&self, name: &LockName) -> String {
        match self {
            Layout::Default { namespace } => format!("{namespace}/{}/", name.encoded()),
            Layout::GoMutex { prefix } => format!("{prefix}{}/", name.as_str()),
        }
    }

    /// The key of one acquire attempt of session `lease_id` (`number`: see the `slots` module;
    /// unused in the Go layout).
    pub fn key(&self, name: &LockName, lease_id: i64, number: u64) -> String {
        match self {
            Layout::Default { .. } => format!("{}{lease_id:x}-{number}", self.lock_prefix(name)),
            Layout::GoMutex { .. } => format!("{}{lease_id:x}", self.lock_prefix(name)),
        }
    }

    /// Whether two attempts of one session on one lock would share a key, so that they must be
    /// serialised in the process (only in the Go layout).
    pub fn one_key_per_session(&self) -> bool {
        matches!(self, Layout::GoMutex { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_prefixes_never_nest() {
        let layout = Layout::Default { namespace: "ns".into() };
        let names = ["a", "a/b", "ab", "a/", "a%2F"];
        for x in names {
            for y in names {
                let (px, py) = (
                    layout.lock_prefix(&LockName::new(x).unwrap()),
                    layout.lock_prefix(&LockName::new(y).unwrap()),
                );
                assert!(x == y || !py.starts_with(&px), "{x:?} contains {y:?}");
            }
        }
        let name = LockName::new("orders/42").unwrap();
        assert_eq!(layout.key(&name, 0x1f, 3), "ns/orders%2F42/1f-3");
    }

    #[test]
    fn go_mutex_matches_etcdctl() {
        let layout = Layout::GoMutex { prefix: String::new() };
        let name = LockName::new("orders/42").unwrap();
        assert_eq!(layout.key(&name, 0x694d7cd5e1b2a00f, 9), "orders/42/694d7cd5e1b2a00f");
        let nested = Layout::GoMutex { prefix: "svc/".into() };
        assert_eq!(nested.lock_prefix(&name), "svc/orders/42/");
    }
}
