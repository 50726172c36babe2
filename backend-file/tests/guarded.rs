//! The file backend's guarded writes beyond the shared suite: one key written under several
//! locks at once, and what a write cut short leaves in the store.

mod common;

use common::FileHarness;
use locksmith_core::conformance::{unique_name, Harness};

/// Holders of two different locks add one to the same key with compare-and-sets, 200 times
/// each, at once: each check is its own lease's, so only the key's own `flock` keeps the two
/// from reading the same value and both writing the next one. No update is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_under_two_locks_loses_no_update() {
    let h = FileHarness::new();
    let key = format!("/guarded/{}", unique_name("shared_key"));
    let mut writers = tokio::task::JoinSet::new();
    for lock in ["a", "b"] {
        let locker = h.locker().await;
        let (name, key) = (unique_name(lock), key.clone());
        writers.spawn(async move {
            let guard = locker.lock(&name).acquire().await.expect("acquire");
            let store = guard.guarded();
            let mut conflicts = 0u32;
            for _ in 0..200 {
                loop {
                    let current = store.get(&key).await.expect("get");
                    let n: u64 = current
                        .as_deref()
                        .map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap());
                    if store
                        .compare_and_set(&key, current.as_deref(), (n + 1).to_string())
                        .await
                        .expect("cas")
                    {
                        break;
                    }
                    conflicts += 1;
                }
            }
            guard.release().await.expect("release");
            conflicts
        });
    }
    let mut conflicts = 0;
    while let Some(done) = writers.join_next().await {
        conflicts += done.expect("a writer");
    }
    let reader = h.locker().await;
    let total = reader.backend().read_key(&key).await.expect("read");
    assert_eq!(total.as_deref(), Some(&b"400"[..]), "{conflicts} conflicts");
}

/// A write cut short (its process killed before the rename) leaves its temporary file: the value
/// before it is what reads see, and the next write of the key goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_cut_short_leaves_the_value_before_it() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let guard = locker.lock(unique_name("cut")).acquire().await.expect("acquire");
    let key = "/guarded/cut";
    guard.guarded().put(key, "first").await.expect("put");
    let data = h.dir.join(".data");
    let names: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|f| f.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .collect();
    let [name] = names.as_slice() else { panic!("{names:?}") };
    // What a process killed in the middle of the next write leaves: half of a value's file.
    let whole = std::fs::read(data.join(name)).unwrap();
    let temp = data.join(format!(".{name}.tmp"));
    std::fs::write(&temp, &whole[..whole.len() / 2]).unwrap();
    assert_eq!(guard.guarded().get(key).await.unwrap().as_deref(), Some(&b"first"[..]));
    assert!(guard
        .guarded()
        .compare_and_set(key, Some(b"first"), "second")
        .await
        .expect("cas"));
    assert_eq!(guard.guarded().get(key).await.unwrap().as_deref(), Some(&b"second"[..]));
    assert!(!temp.exists(), "the cut write's temporary file is left");
    guard.release().await.expect("release");
}

/// Keys written and deleted, and compare-and-sets that found no value, leave nothing in the
/// store: no value, no key's lock file, no temporary file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_without_values_leave_no_files() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let guard = locker.lock(unique_name("empty")).acquire().await.expect("acquire");
    let store = guard.guarded();
    for i in 0..20 {
        let key = format!("/guarded/empty/{i}");
        store.put(&key, "v").await.expect("put");
        assert!(!store.compare_and_set(&key, None, "w").await.expect("cas"));
        assert!(store.delete(&key).await.expect("delete"));
        assert!(!store.delete(&key).await.expect("delete again"));
        assert!(!store.compare_and_set(&key, Some(b"v"), "w").await.expect("cas"));
    }
    let left: Vec<_> = std::fs::read_dir(h.dir.join(".data"))
        .unwrap()
        .map(|f| f.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    guard.release().await.expect("release");
}
