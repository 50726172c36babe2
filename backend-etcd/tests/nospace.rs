//! An etcd at its space quota: `etcd-quota` (scripts/backends, `--quota-backend-bytes` 16 MiB)
//! is filled with other keys until it raises its NOSPACE alarm, after which it refuses every
//! write until an operator compacts, defragments and disarms it. What must hold meanwhile:
//!
//! - a new acquire (and a new locker) ends at once with [`LockError::Denied`] naming the quota
//!   and what to do, not a retry until its timeout (the alarm does not go away by waiting);
//! - a lock held before keeps renewing (a lease keep-alive is no write) and its release (a
//!   delete, which a full etcd takes) leaves nothing behind;
//! - once the operator has freed space and disarmed the alarm, locks are granted again.
//!
//! The test leaves the server as it found it (keys deleted, compacted, defragmented, disarmed),
//! also when it fails half-way: [`Fill`] cleans up on drop.

mod common;

use std::time::Duration;

use etcd_client::{AlarmAction, AlarmOptions, AlarmType, Client, GetOptions};
use locksmith_core::conformance::unique_name;
use locksmith_core::{LockError, Locker};

const FILL_PREFIX: &str = "nospace-test/fill/";

fn quota_url() -> String {
    common::env_url("LOCKSMITH_TEST_ETCD_QUOTA")
}

async fn locker() -> Locker {
    let url = common::with_query(&quota_url(), "ttl=2s");
    locksmith_etcd::connect(&locksmith_core::driver::BackendUrl::parse(&url).unwrap())
        .await
        .expect("connect")
}

/// Writes 512 KiB values under [`FILL_PREFIX`] until etcd answers NOSPACE; returns its message.
async fn fill(client: &mut Client) -> String {
    let value = vec![b'x'; 512 * 1024];
    for i in 0..200 {
        match client.put(format!("{FILL_PREFIX}{i}"), value.clone(), None).await {
            Ok(_) => continue,
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.contains("space exceeded"),
                    "filling etcd-quota failed otherwise: {text}"
                );
                return text;
            }
        }
    }
    panic!("200 × 512 KiB did not reach etcd-quota's space quota");
}

/// Frees what the fill took and lifts the alarm, as an operator does: delete, compact,
/// defragment, disarm every alarm.
async fn free_space(client: &mut Client) {
    let deleted = client
        .delete(FILL_PREFIX, Some(etcd_client::DeleteOptions::new().with_prefix()))
        .await
        .expect("delete the fill");
    let revision = deleted.header().map(|h| h.revision()).unwrap_or(0);
    if revision > 0 {
        let _ = client.compact(revision, None).await;
    }
    client.defragment().await.expect("defragment");
    let alarms = client
        .alarm(AlarmAction::Get, AlarmType::None, None)
        .await
        .expect("list alarms");
    for alarm in alarms.alarms() {
        let mut options = AlarmOptions::new();
        options.with_member(alarm.member_id());
        client
            .alarm(AlarmAction::Deactivate, alarm.alarm(), Some(options))
            .await
            .expect("disarm");
    }
}

/// Frees the server again when the test ends, whichever way.
struct Fill(Option<Client>);

impl Drop for Fill {
    fn drop(&mut self) {
        if let Some(mut client) = self.0.take() {
            // A plain thread with its own runtime: the test's runtime may be shutting down.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(free_space(&mut client));
            })
            .join();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_its_space_quota_etcd_refuses_new_locks_at_once_and_held_ones_keep_renewing() {
    common::init_tracing();
    let mut admin = common::admin(&quota_url()).await;
    // A run that failed before its clean-up left the server full: start from a free one.
    free_space(&mut admin).await;
    let (holder, other) = (locker().await, locker().await);
    let name = unique_name("nospace");
    let held = holder.lock(&name).acquire().await.expect("acquire before the fill");
    let token = held.fencing_token();

    let mut fill_guard = Fill(Some(admin.clone()));
    let said = fill(&mut admin).await;
    let alarms = admin
        .alarm(AlarmAction::Get, AlarmType::None, None)
        .await
        .expect("alarms");
    assert!(
        alarms.alarms().iter().any(|a| a.alarm() == AlarmType::Nospace),
        "etcd answered {said:?} but raised no NOSPACE alarm"
    );

    // A new acquire on the locker that holds: refused at once, naming the quota.
    let started = tokio::time::Instant::now();
    let refused = holder
        .lock(unique_name("nospace-new"))
        .timeout(Duration::from_secs(20))
        .acquire()
        .await
        .expect_err("an acquire on a full etcd");
    let took = started.elapsed();
    let text = refused.to_string();
    assert!(matches!(refused, LockError::Denied(_)), "not Denied: {refused:?}");
    assert!(text.contains("NOSPACE") && text.contains("quota"), "{text}");
    assert!(took < Duration::from_secs(5), "refused only after {took:?}: {text}");
    // A waiter on the held name (another locker, connected before) is refused the same way: its
    // queue entry is a write.
    let waiter = other.lock(&name).timeout(Duration::from_secs(20)).acquire().await;
    assert!(matches!(waiter, Err(LockError::Denied(_))), "{waiter:?}");

    // A new locker (its session lease is a write) is refused at connect, as clearly.
    let started = tokio::time::Instant::now();
    let url = common::with_query(&quota_url(), "ttl=2s");
    let connect = locksmith_etcd::connect(&locksmith_core::driver::BackendUrl::parse(&url).unwrap()).await;
    assert!(matches!(connect, Err(LockError::Denied(_))), "{:?}", connect.err());
    assert!(started.elapsed() < Duration::from_secs(5));

    // The held lock keeps renewing through three TTLs of the full server.
    tokio::select! {
        reason = held.lost() => panic!("a lock held on a full etcd was lost: {reason:?}"),
        () = tokio::time::sleep(Duration::from_secs(6)) => {}
    }
    assert!(held.lost_reason().is_none());
    // Its release is a delete, which a full etcd takes: nothing is left behind.
    held.release().await.expect("release on a full etcd");

    // The operator frees space: locks are granted again, the released one at once.
    let mut admin2 = fill_guard.0.take().unwrap();
    free_space(&mut admin2).await;
    let next = other
        .lock(&name)
        .timeout(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire after");
    assert!(next.fencing_token() > token, "a token went backwards");
    next.release().await.expect("release");
    let left = admin2
        .get(FILL_PREFIX, Some(GetOptions::new().with_prefix().with_count_only()))
        .await
        .expect("count");
    assert_eq!(left.count(), 0);
}
