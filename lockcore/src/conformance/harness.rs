//! What a backend provides to the suite ([`Harness`]) and the helpers every test uses: server
//! URLs from the environment, unique lock names, bounded waits.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use crate::name::LockName;
use crate::{Family, Locker};

/// What a backend's tests provide to the suite.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// A new [`Locker`] with its own connection (or session) to the backend under test, as a
    /// separate process would have.
    async fn locker(&self) -> Locker;

    /// Removes the current holder of `name` on the server, behind its back, as an operator deleting
    /// the key or node would.
    async fn delete_behind_back(&self, name: &LockName);

    /// [`Harness::delete_behind_back`] for a lock of any family: removes the holders of the
    /// semaphore, read-write lock or election `name` on the server. Harnesses that run
    /// [`primitive_tests!`](crate::primitive_tests) implement it; the default knows mutexes only.
    async fn delete_behind_back_in(&self, family: Family, name: &LockName) {
        assert_eq!(
            family,
            Family::Mutex,
            "this harness cannot remove the holders of a {}",
            family.name()
        );
        self.delete_behind_back(name).await
    }

    /// The keys or nodes on the server that represent holders or waiters of `name` (not counters or
    /// other bookkeeping that is meant to stay). Used to show that nothing is left behind.
    async fn residue(&self, name: &LockName) -> Vec<String>;

    /// [`Harness::residue`] for a lock of any family: the holder and waiter entries of the
    /// semaphore, read-write lock or election `name`. Harnesses that run
    /// [`primitive_tests!`](crate::primitive_tests) implement it; the default knows mutexes only.
    async fn residue_in(&self, family: Family, name: &LockName) -> Vec<String> {
        assert_eq!(
            family,
            Family::Mutex,
            "this harness cannot list the entries of a {}",
            family.name()
        );
        self.residue(name).await
    }

    /// A locker whose leases outlive a loaded machine's slow renewals (a few seconds): for the
    /// tests that hold locks while they load the server (the cancellation storms), which test the
    /// clean-up, not expiry. Default: [`Harness::locker`]; a harness whose `locker` has leases of
    /// about a second (etcd's session TTL) gives a longer one here.
    async fn sturdy_locker(&self) -> Locker {
        self.locker().await
    }

    /// The key a guarded-write test ([`crate::conformance::guarded`]) writes under `family`'s lock
    /// `name`: `key` itself by default; on Redis Cluster, `key` with the lock's hash tag, so that
    /// it is in the lock's slot.
    fn guarded_key(&self, family: Family, name: &str, key: &str) -> String {
        let _ = (family, name);
        key.to_owned()
    }

    /// A short TTL this backend honours (the server's minimum or a little more): used in tests of
    /// expiry and renewal.
    fn short_ttl(&self) -> Duration;

    /// Whether an election observer sees a handover (a leader resigning while the next candidate
    /// waits in line) as one change of leader, never "nobody leads" in between: true on every
    /// backend. A harness over [`crate::Dual`] says false: its next candidate waits in the old
    /// backend, not yet in line in the new one whose leadership it reports.
    fn seamless_handover(&self) -> bool {
        true
    }
}

/// The URL in the environment variable `var` (`LOCKSMITH_TEST_ETCD`, ...), or a panic that says
/// how to start the test servers: a backend test fails, never skips, when its server is missing.
pub fn env_url(var: &str) -> String {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{var} is not set: start the test servers with `eval \"$(scripts/backends up)\"` and run the tests again"
        ),
    }
}

/// A unique lock name for one test: `conformance/<test>/<random>`.
pub fn unique_name(test: &str) -> String {
    format!("conformance/{test}/{:016x}", rand::random::<u64>())
}

/// Bounds a step of a test: panics with `what` if `fut` takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: still not done after {limit:?}"),
    }
}

/// Waits until `locker` sees at least `n` waiters on the mutex `name` (`inspect`, every 20 ms);
/// panics as [`within`] does after `limit`.
pub async fn until_waiters(locker: &Locker, name: &str, n: usize, limit: Duration) {
    within(limit, "the waiters to queue", async {
        while locker.inspect(name).await.expect("inspect").waiters < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Waits (within `limit`) until `name` has at most `n` waiters on `locker`'s view: for a
/// cancelled call's queue entry, which its clean-up removes in the background.
pub async fn until_waiters_at_most(locker: &Locker, name: &str, n: usize, limit: Duration) {
    within(limit, "the waiters to leave", async {
        while locker.inspect(name).await.expect("inspect").waiters > n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Makes the builder of one kind of lock on a locker, for a lock name (a permit, a reader, a
/// writer): for the tests that go through the kinds in turn.
pub(crate) type Builder = fn(&Locker, &str) -> crate::LockBuilder;

/// The generous bound used for steps that should take about one TTL.
pub(crate) fn patience(h: &impl Harness) -> Duration {
    h.short_ttl() * 10 + Duration::from_secs(10)
}

pub(crate) async fn wait_for_residue(h: &impl Harness, name: &LockName, count: usize) {
    wait_for_residue_in(h, Family::Mutex, name, count).await
}

/// Waits (within [`patience`]) until `family`'s lock `name` has `count` holder and waiter entries.
pub(crate) async fn wait_for_residue_in(h: &impl Harness, family: Family, name: &LockName, count: usize) {
    let mut last = Vec::new();
    let waited = tokio::time::timeout(patience(h), async {
        loop {
            last = h.residue_in(family, name).await;
            if last.len() == count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "waiting for {count} holder/waiter entries of the {} {name}: still {last:?} after {:?}",
        family.name(),
        patience(h)
    );
}
