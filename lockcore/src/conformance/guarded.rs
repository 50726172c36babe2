//! The guarded-write suite ([`guarded_tests!`](crate::guarded_tests)): writes to the store that
//! commit only while the lock is held, for every backend that has them. The decisive tests call
//! [`crate::driver::LockBackend::write_guarded`] directly with a stale lease, so that what is
//! checked is the server's refusal, not the guard's own knowledge that its lock is lost.

use std::time::Duration;

use super::harness::{patience, unique_name, within, Harness};
use crate::driver::{GuardedWrite, Lease};
use crate::{Family, LockError, Locker, MAX_GUARDED_KEY_LEN, MAX_GUARDED_VALUE_LEN};

/// A key of the store that no other test run uses: an absolute, `/`-separated path, which is an
/// etcd key, a Redis key and a ZooKeeper path alike.
pub fn unique_key(test: &str) -> String {
    format!("/locksmith-guarded-test/{test}-{:016x}/value", rand::random::<u64>())
}

/// A put of `value` at `key`.
fn put(key: &str, value: &[u8]) -> GuardedWrite {
    GuardedWrite::Put {
        key: key.to_owned(),
        value: value.to_vec(),
    }
}

/// Writes with a lease straight to the backend (no check by the guard first): what a holder that
/// does not yet know its lock is gone would send.
async fn write_as(locker: &Locker, lease: &Lease, write: &GuardedWrite) -> crate::Result<bool> {
    within(
        Duration::from_secs(30),
        "a guarded write",
        locker.backend().write_guarded(lease, write),
    )
    .await
}

async fn read(locker: &Locker, key: &str) -> Option<Vec<u8>> {
    within(Duration::from_secs(30), "a read", locker.backend().read_key(key))
        .await
        .expect("read")
}

/// Put, overwrite, delete and compare-and-set apply while the lock is held, with what each says
/// it did; binary and empty values come back as written.
pub async fn guarded_writes_apply_while_held(h: &impl Harness) {
    let locker = h.locker().await;
    let name = unique_name("guarded_apply");
    let key = h.guarded_key(Family::Mutex, &name, &unique_key("apply"));
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let store = guard.guarded();
    let binary: Vec<u8> = (0..=255u8).collect();
    store.put(&key, binary.clone()).await.expect("put");
    assert_eq!(store.get(&key).await.expect("get"), Some(binary.clone()));
    store.put(&key, Vec::new()).await.expect("put an empty value");
    assert_eq!(store.get(&key).await.expect("get"), Some(Vec::new()));
    assert!(store.delete(&key).await.expect("delete"), "the key existed");
    assert!(!store.delete(&key).await.expect("delete again"), "the key was gone");
    assert_eq!(store.get(&key).await.expect("get"), None);

    assert!(
        store.compare_and_set(&key, None, "1").await.expect("cas"),
        "absent as expected"
    );
    assert!(
        !store.compare_and_set(&key, None, "x").await.expect("cas"),
        "present, expected absent"
    );
    assert!(
        !store.compare_and_set(&key, Some(b"0"), "x").await.expect("cas"),
        "wrong value"
    );
    assert!(
        store.compare_and_set(&key, Some(b"1"), "2").await.expect("cas"),
        "right value"
    );
    assert_eq!(store.get(&key).await.expect("get").as_deref(), Some(&b"2"[..]));
    assert!(store.delete(&key).await.expect("delete"));
    guard.release().await.expect("release");
}

/// A semaphore permit and a read-write lock's writer guard write too (for backends with those
/// primitives).
pub async fn guarded_writes_under_permits_and_writers(h: &impl Harness) {
    let locker = h.locker().await;
    let name = unique_name("guarded_sem");
    let key = h.guarded_key(Family::Semaphore, &name, &unique_key("permit"));
    let permit = locker.semaphore(&name, 2).acquire().await.expect("permit");
    permit.guarded().put(&key, "permit").await.expect("put under a permit");
    assert_eq!(read(&locker, &key).await.as_deref(), Some(&b"permit"[..]));
    assert!(permit.guarded().delete(&key).await.expect("delete"));
    let own = permit.data_key("permit").expect("a permit's data key");
    permit
        .guarded()
        .put(&own, "permit")
        .await
        .expect("put to the permit's data key");
    assert!(permit.guarded().delete(&own).await.expect("delete"));
    permit.release().await.expect("release");

    let name = unique_name("guarded_rw");
    let key = h.guarded_key(Family::RwLock, &name, &unique_key("writer"));
    let writer = locker.rwlock(&name).write().acquire().await.expect("writer");
    writer
        .guarded()
        .put(&key, "writer")
        .await
        .expect("put under a writer lock");
    assert!(writer.guarded().delete(&key).await.expect("delete under a writer lock"));
    let own = writer.data_key("writer").expect("a writer's data key");
    writer
        .guarded()
        .put(&own, "writer")
        .await
        .expect("put to the writer's data key");
    assert!(writer.guarded().delete(&own).await.expect("delete"));
    writer.release().await.expect("release");
}

/// The decisive case: a holder whose lock was removed (as an expiry or an operator would) writes
/// with its stale lease before it knows; the server refuses every kind of write, nothing lands,
/// and the next holder's writes do.
pub async fn guarded_write_of_a_lost_lock_never_lands(h: &impl Harness) {
    let name = unique_name("guarded_lost");
    let key = h.guarded_key(Family::Mutex, &name, &unique_key("lost"));
    let (a, b) = (h.locker().await, h.locker().await);
    let guard = a.lock(&name).ttl(h.short_ttl()).acquire().await.expect("acquire");
    guard.guarded().put(&key, "first").await.expect("put while held");
    let stale = guard.lease().clone();
    h.delete_behind_back(&stale.name).await;

    let writes = [
        put(&key, b"stale"),
        GuardedWrite::Delete { key: key.clone() },
        GuardedWrite::CompareAndSet {
            key: key.clone(),
            expected: Some(b"first".to_vec()),
            value: b"stale".to_vec(),
        },
    ];
    for write in &writes {
        let result = write_as(&a, &stale, write).await;
        assert!(
            matches!(result, Err(LockError::NotHeld { .. })),
            "{write:?} of a removed lock: {result:?}"
        );
    }
    assert_eq!(
        read(&a, &key).await.as_deref(),
        Some(&b"first"[..]),
        "a stale write landed"
    );

    let next = within(patience(h), "acquiring the removed lock", b.lock(&name).acquire())
        .await
        .expect("acquire");
    assert!(next.fencing_token() > stale.fencing_token);
    next.guarded().put(&key, "second").await.expect("the new holder's put");
    for write in &writes {
        let result = write_as(&a, &stale, write).await;
        assert!(
            matches!(result, Err(LockError::NotHeld { .. })),
            "{write:?} beside a new holder: {result:?}"
        );
    }
    let through_guard = guard.guarded().put(&key, "stale").await;
    assert!(
        matches!(through_guard, Err(LockError::NotHeld { .. })),
        "{through_guard:?}"
    );
    assert_eq!(
        read(&b, &key).await.as_deref(),
        Some(&b"second"[..]),
        "a stale write landed"
    );
    assert!(next.guarded().delete(&key).await.expect("delete"));
    next.release().await.expect("release");
    drop(guard);
}

/// A holder that stops renewing (a pause, a stalled process: here an abandoned guard) outlives
/// its lease; once another holder has the lock, the old lease's writes are refused.
pub async fn guarded_write_of_an_expired_lease_never_lands(h: &impl Harness) {
    let name = unique_name("guarded_expired");
    let key = h.guarded_key(Family::Mutex, &name, &unique_key("expired"));
    let (a, b) = (h.locker().await, h.locker().await);
    let guard = a.lock(&name).ttl(h.short_ttl()).acquire().await.expect("acquire");
    let stale = guard.abandon();
    let next = within(patience(h), "acquiring an expired lock", b.lock(&name).acquire())
        .await
        .expect("acquire");
    next.guarded().put(&key, "new holder").await.expect("put");
    let result = write_as(&a, &stale, &put(&key, b"paused holder")).await;
    assert!(matches!(result, Err(LockError::NotHeld { .. })), "{result:?}");
    assert_eq!(read(&b, &key).await.as_deref(), Some(&b"new holder"[..]));
    assert!(next.guarded().delete(&key).await.expect("delete"));
    next.release().await.expect("release");
}

/// Bad keys and values get clear errors, never a panic; the lock is still held and usable after.
pub async fn guarded_bad_input_is_rejected(h: &impl Harness) {
    let locker = h.locker().await;
    let name = unique_name("guarded_bad");
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let store = guard.guarded();
    let long_key = "k".repeat(MAX_GUARDED_KEY_LEN + 1);
    for key in ["", long_key.as_str(), "/a\0b"] {
        let result = store.put(key, "v").await;
        assert!(matches!(result, Err(LockError::InvalidName(_))), "{key:?}: {result:?}");
        let result = store.get(key).await;
        assert!(matches!(result, Err(LockError::InvalidName(_))), "{key:?}: {result:?}");
    }
    let key = h.guarded_key(Family::Mutex, &name, &unique_key("bad"));
    let result = store.put(&key, vec![0u8; MAX_GUARDED_VALUE_LEN + 1]).await;
    assert!(matches!(result, Err(LockError::InvalidOption(_))), "{result:?}");
    let result = store
        .compare_and_set(&key, Some(&vec![1u8; MAX_GUARDED_VALUE_LEN + 1]), "v")
        .await;
    assert!(matches!(result, Err(LockError::InvalidOption(_))), "{result:?}");
    assert_eq!(store.get(&key).await.expect("get"), None, "a refused write landed");
    store
        .put(&key, vec![7u8; MAX_GUARDED_VALUE_LEN])
        .await
        .expect("the largest value");
    assert!(store.delete(&key).await.expect("delete"));
    assert!(guard.is_held());
    guard.release().await.expect("release");
}

/// A lock's data key ([`crate::LockGuard::data_key`]) takes guarded writes under that lock (a
/// mutex's and a permit's: on Redis Cluster each in its own lock's hash slot), is the same for
/// every holder, and differs between locks and suffixes; a bad suffix is refused.
pub async fn data_keys_take_guarded_writes(h: &impl Harness) {
    let locker = h.locker().await;
    let other = h.locker().await;
    let name = unique_name("data_key");
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let key = guard.data_key("cursor").expect("a data key");
    guard
        .guarded()
        .put(&key, "17")
        .await
        .expect("a guarded put to the data key");
    assert_ne!(guard.data_key("other").expect("a data key"), key);
    assert!(matches!(guard.data_key(""), Err(LockError::InvalidName(_))));
    guard.release().await.expect("release");

    let again = other.lock(&name).acquire().await.expect("acquire again");
    assert_eq!(
        again.data_key("cursor").expect("a data key"),
        key,
        "another holder's key"
    );
    assert_eq!(
        again.guarded().get(&key).await.expect("get").as_deref(),
        Some(&b"17"[..])
    );
    assert!(again.guarded().delete(&key).await.expect("delete"));
    again.release().await.expect("release");

    let elsewhere = other.lock(format!("{name}/b")).acquire().await.expect("acquire");
    assert_ne!(
        elsewhere.data_key("cursor").expect("a data key"),
        key,
        "another lock's key"
    );
    elsewhere.release().await.expect("release");
}

/// A token register admits a token at least as high as every one before (an equal one again),
/// refuses a lower one without changing anything, is shared by every client that names it, and
/// leaves no lock held; a bad name is refused.
pub async fn token_register_admits_in_order(h: &impl Harness) {
    use crate::Admission::{Admitted, Stale};
    let locker = h.locker().await;
    let name = unique_name("register");
    let register = locker.token_register(&name).expect("a register");
    assert_eq!(register.highest().await.expect("highest"), None);
    assert_eq!(register.admit(5).await.expect("admit"), Admitted { previous: None });
    assert_eq!(register.admit(5).await.expect("admit"), Admitted { previous: Some(5) });
    assert_eq!(register.admit(4).await.expect("admit"), Stale { highest: 5 });
    assert_eq!(register.admit(0).await.expect("admit"), Stale { highest: 5 });
    assert_eq!(register.admit(9).await.expect("admit"), Admitted { previous: Some(5) });
    assert_eq!(register.highest().await.expect("highest"), Some(9));

    let other = h.locker().await.token_register(&name).expect("a register");
    assert_eq!(other.admit(8).await.expect("admit"), Stale { highest: 9 });
    assert_eq!(
        other.admit(u64::MAX).await.expect("admit"),
        Admitted { previous: Some(9) }
    );
    assert_eq!(register.highest().await.expect("highest"), Some(u64::MAX));
    let fresh = locker.token_register(&format!("{name}/b")).expect("a register");
    assert_eq!(fresh.highest().await.expect("highest"), None, "registers are separate");

    let lock = format!("{}{name}", crate::REGISTER_LOCK_PREFIX);
    let info = locker.inspect(&lock).await.expect("inspect");
    assert!(
        info.holder.is_none() && info.waiters == 0,
        "the register's lock is left: {info:?}"
    );
    assert!(matches!(locker.token_register(""), Err(LockError::InvalidName(_))));
    let huge = "x".repeat(crate::MAX_NAME_LEN);
    assert!(matches!(locker.token_register(&huge), Err(LockError::InvalidName(_))));
    // A name whose register key would be too long for the store: refused now, not by every
    // admission later (a register accepted here must work).
    for len in [900, 1000, 1005] {
        match locker.token_register(&"y".repeat(len)) {
            Err(LockError::InvalidName(_)) => {}
            Ok(register) => {
                let admitted = register.admit(1).await.expect("a register that was accepted admits");
                assert!(matches!(admitted, Admitted { .. }), "{admitted:?}");
            }
            Err(e) => panic!("a register name of {len} bytes: {e:?}"),
        }
    }
}

/// Admissions from three clients at once, 30 tokens shuffled: the register ends on the highest,
/// every admission says a previous token no higher than its own, and every refusal names a
/// highest above the refused token.
pub async fn token_register_concurrent_admits_end_on_the_maximum(h: &impl Harness) {
    let name = unique_name("register_race");
    let mut tokens: Vec<u64> = (1..=30).collect();
    // A fixed shuffle: high tokens early, so that some later ones are refused.
    tokens.sort_by_key(|t| (t * 7919) % 31);
    let mut clients = tokio::task::JoinSet::new();
    for part in tokens.chunks(10) {
        let register = h.locker().await.token_register(&name).expect("a register");
        let part = part.to_vec();
        clients.spawn(async move {
            let mut answers = Vec::new();
            for token in part {
                answers.push((token, register.admit(token).await.expect("admit")));
            }
            answers
        });
    }
    let mut answers = Vec::new();
    while let Some(done) = clients.join_next().await {
        answers.extend(done.expect("a client"));
    }
    for (token, answer) in &answers {
        match answer {
            crate::Admission::Admitted { previous } => {
                assert!(
                    previous.is_none_or(|p| p <= *token),
                    "{token} admitted over {previous:?}"
                )
            }
            crate::Admission::Stale { highest } => assert!(highest > token, "{token} refused below {highest}"),
        }
    }
    let register = h.locker().await.token_register(&name).expect("a register");
    assert_eq!(register.highest().await.expect("highest"), Some(30));
}
