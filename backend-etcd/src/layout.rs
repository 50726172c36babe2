//! Where the keys of a lock live.
//!
//! Every lock (a name in one [`Family`]) is a key prefix; every holder or waiter is one key under
//! it, attached to its session lease. The queue is the keys under the prefix in create-revision
//! order (see [`locksmith_core::driver::queue`]).

use locksmith_core::driver::LockName;
use locksmith_core::{Family, LockError, Result};

/// The key layout of a backend, chosen with the URL option `layout=`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `layout=default`: `<namespace>/<encoded name><family suffix>/<lease id hex>-<n>`.
    ///
    /// The namespace (the URL path, or `locksmith`) and the name are each encoded into one
    /// segment without `/` ([`LockName::encoded`]), so no lock's prefix is a prefix of another's:
    /// `a`, `a/b`, `ab` and `a/` are independent locks, in any namespace. The family suffix
    /// ([`Family::segment`]: none for a mutex, `.sem`, `.rw`, `.elect`) makes the mutex, the
    /// semaphore, the read-write lock and the election of one name four independent locks. `n` is the lowest
    /// number no other live attempt of the session on this lock uses, so attempts of one session
    /// never share a key, and a lock taken again reuses the name of its deleted key.
    Default {
        /// The encoded namespace segment.
        namespace: String,
    },
    /// `layout=go-mutex`: exactly the keys of etcd's Go `concurrency.Mutex` and `Election`, and
    /// of `etcdctl lock NAME` and `etcdctl elect NAME`: `<prefix>NAME/<lease id hex>`, with the
    /// raw name. Mutexes and elections only (Go has no semaphore or read-write lock to share
    /// keys with).
    ///
    /// It inherits the Go prefix pitfall: the lock `a` is the prefix `a/`, which also contains
    /// the keys of the lock `a/b`, so a holder or waiter of `a/b` can own or block `a`. And, as
    /// in Go, a mutex and an election of one name share their prefix: they are one queue.
    GoMutex {
        /// Put before every name: empty, or the URL path followed by `/`.
        prefix: String,
    },
}

impl Layout {
    /// The prefix under which all holder and waiter keys of the mutex `name` live (ends with `/`).
    pub fn lock_prefix(&self, name: &LockName) -> String {
        self.prefix(Family::Mutex, name)
    }

    /// The prefix under which all holder and waiter keys of `family`'s lock `name` live (ends
    /// with `/`). In the Go layout it is the same for every family (see [`Layout::supports`]).
    pub fn prefix(&self, family: Family, name: &LockName) -> String {
        match self {
            Layout::Default { namespace } => format!("{namespace}/{}/", family.segment(name)),
            Layout::GoMutex { prefix } => format!("{prefix}{}/", name.as_str()),
        }
    }

    /// The key of one acquire attempt of session `lease_id` on the mutex `name` (`number`: see
    /// the `slots` module; unused in the Go layout).
    pub fn key(&self, name: &LockName, lease_id: i64, number: u64) -> String {
        self.key_in(Family::Mutex, name, lease_id, number)
    }

    /// [`Layout::key`] for a lock of `family`.
    pub fn key_in(&self, family: Family, name: &LockName, lease_id: i64, number: u64) -> String {
        match self {
            Layout::Default { .. } => format!("{}{lease_id:x}-{number}", self.prefix(family, name)),
            Layout::GoMutex { .. } => format!("{}{lease_id:x}", self.prefix(family, name)),
        }
    }

    /// Whether this layout has keys for `family`: the default layout has all of them; the Go
    /// layout has the Go package's mutex and election only, and refuses the others with
    /// [`LockError::InvalidOption`].
    pub fn supports(&self, family: Family) -> Result<()> {
        match (self, family) {
            (Layout::Default { .. }, _) | (Layout::GoMutex { .. }, Family::Mutex | Family::Election) => Ok(()),
            (Layout::GoMutex { .. }, other) => Err(LockError::InvalidOption(format!(
                "layout=go-mutex has the keys of etcd's Go concurrency.Mutex and Election only, and Go has no {0}: \
                 use the default layout (no layout= option) for a {0}",
                other.name()
            ))),
        }
    }

    /// Refuses, in the Go layout without a URL path, the names whose queue holds the guarded data
    /// keys (`.data/<segment>/<suffix>`, `guarded::data_key`): `.data` and `.data/…`. Those keys
    /// have no lease and stay, so such a lock could never be granted, to locksmith or to
    /// `etcdctl lock`.
    pub fn check_name(&self, name: &LockName) -> Result<()> {
        let name = name.as_str();
        match self {
            Layout::GoMutex { prefix } if prefix.is_empty() && (name == ".data" || name.starts_with(".data/")) => {
                Err(LockError::InvalidName(format!(
                    "{name:?}: with layout=go-mutex and no URL path, the keys under .data/ are the guarded \
                     data keys (guard.data_key()), not a lock's queue; use another name, or a URL path for \
                     the locks (etcd://host/locks?layout=go-mutex)"
                )))
            }
            _ => Ok(()),
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
        assert_eq!(
            layout.key_in(Family::Semaphore, &name, 0x1f, 3),
            "ns/orders%2F42.sem/1f-3"
        );
        assert_eq!(layout.prefix(Family::RwLock, &name), "ns/orders%2F42.rw/");
        assert_eq!(layout.prefix(Family::Election, &name), "ns/orders%2F42.elect/");
        for family in Family::ALL {
            assert!(layout.supports(family).is_ok());
        }
    }

    #[test]
    fn go_mutex_matches_etcdctl() {
        let layout = Layout::GoMutex { prefix: String::new() };
        let name = LockName::new("orders/42").unwrap();
        assert_eq!(layout.key(&name, 0x694d7cd5e1b2a00f, 9), "orders/42/694d7cd5e1b2a00f");
        let nested = Layout::GoMutex { prefix: "svc/".into() };
        assert_eq!(nested.lock_prefix(&name), "svc/orders/42/");
        // `etcdctl elect orders/42 ...` writes orders/42/<lease hex>, as `etcdctl lock` does.
        assert_eq!(
            layout.key_in(Family::Election, &name, 0x694d7cd5e1b2a00f, 9),
            "orders/42/694d7cd5e1b2a00f"
        );
        assert!(layout.supports(Family::Election).is_ok());
        for family in [Family::Semaphore, Family::RwLock] {
            assert!(matches!(layout.supports(family), Err(LockError::InvalidOption(_))));
        }
    }
}
