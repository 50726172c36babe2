//! `layout=go-mutex`: the keys of etcd's Go `concurrency.Mutex`, as used by `etcdctl lock`.
//! A lock held by `etcdctl lock NAME` blocks locksmith and the reverse. Against
//! `LOCKSMITH_TEST_ETCD`, with the `etcdctl` binary (Debian package `etcd-client`).

mod common;

use std::process::Stdio;
use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{LockError, Locker};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const PATIENCE: Duration = Duration::from_secs(30);

fn base() -> String {
    common::env_url("LOCKSMITH_TEST_ETCD")
}

async fn go_locker() -> Locker {
    common::init_tracing();
    let url = BackendUrl::parse(&common::with_query(&base(), "layout=go-mutex&ttl=2s")).expect("url");
    locksmith_etcd::connect(&url).await.expect("connect")
}

fn etcdctl_lock(name: &str, command: &[&str]) -> Child {
    let mut cmd = Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", common::endpoints(&base()).join(",")))
        .args(["lock", "--ttl=5", name]);
    if !command.is_empty() {
        cmd.arg("--").args(command);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
    cmd.spawn().expect("run etcdctl (Debian package etcd-client)")
}

/// Asks etcdctl to stop; `etcdctl lock` releases its lock on SIGTERM.
fn terminate(child: &Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
}

/// `etcdctl lock NAME` holds the lock (it prints its key and holds until signalled): locksmith
/// sees it as the holder, cannot take the lock, waits, and gets it once etcdctl lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_blocks_locksmith() {
    let name = unique_name("compat_etcdctl_first");
    let mut etcdctl = etcdctl_lock(&name, &[]);
    let mut lines = BufReader::new(etcdctl.stdout.take().expect("stdout")).lines();
    let key = within(PATIENCE, "etcdctl printing its lock key", lines.next_line())
        .await
        .expect("read")
        .expect("a key");
    let lease_hex = key
        .strip_prefix(&format!("{name}/"))
        .expect("etcdctl's key is NAME/<lease>");
    assert!(i64::from_str_radix(lease_hex, 16).is_ok(), "{key}");

    let locker = go_locker().await;
    let info = locker
        .backend()
        .inspect(&LockName::new(&name).unwrap())
        .await
        .expect("inspect");
    assert_eq!(info.holder.expect("etcdctl holds it").holder_id, key);
    assert!(
        locker.lock(&name).try_acquire().await.expect("try").is_none(),
        "taken while etcdctl holds it"
    );
    let timed_out = locker.lock(&name).timeout(Duration::from_millis(500)).acquire().await;
    assert!(matches!(timed_out, Err(LockError::Timeout(_))), "{timed_out:?}");

    let waiter = tokio::spawn({
        let (locker, name) = (locker.clone(), name.clone());
        async move { locker.lock(&name).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "locksmith got the lock while etcdctl held it");
    terminate(&etcdctl);
    let guard = within(PATIENCE, "locksmith after etcdctl released", waiter)
        .await
        .unwrap()
        .expect("acquire");
    let my_key = &guard.lease().holder_id;
    assert!(
        my_key.starts_with(&format!("{name}/")) && !my_key[name.len() + 1..].contains('/'),
        "{my_key}"
    );
    guard.release().await.expect("release");
    let _ = etcdctl.wait().await;
}

/// locksmith holds the lock: `etcdctl lock NAME -- cmd` queues behind it and runs its command
/// only after locksmith released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locksmith_blocks_etcdctl_lock() {
    let name = unique_name("compat_locksmith_first");
    let locker = go_locker().await;
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let mut etcdctl = etcdctl_lock(&name, &["sh", "-c", "echo got $ETCD_LOCK_KEY"]);
    let mut lines = BufReader::new(etcdctl.stdout.take().expect("stdout")).lines();
    // etcdctl queues behind us: its key shows up as a waiter.
    within(PATIENCE, "etcdctl queued", async {
        loop {
            let info = locker
                .backend()
                .inspect(&LockName::new(&name).unwrap())
                .await
                .expect("inspect");
            if info.waiters == 1 {
                assert_eq!(info.holder.expect("holder").holder_id, guard.lease().holder_id);
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Still queued a while later: nothing printed, not exited.
    let early = tokio::time::timeout(Duration::from_millis(500), lines.next_line()).await;
    assert!(
        early.is_err(),
        "etcdctl got the lock while locksmith held it: {early:?}"
    );
    guard.release().await.expect("release");
    let got = within(PATIENCE, "etcdctl after locksmith released", lines.next_line())
        .await
        .expect("read");
    let got = got.expect("etcdctl printed nothing");
    assert!(got.starts_with(&format!("got {name}/")), "{got}");
    let status = within(PATIENCE, "etcdctl exiting", etcdctl.wait()).await.expect("wait");
    assert!(status.success(), "{status}");
}

/// The key is exactly `NAME/<session lease id in lower-case hex>`, and one locker's attempts on
/// one name are serialised in the process (they would share that key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_layout_keys_and_one_key_per_session() {
    let name = unique_name("compat_keys");
    let locker = go_locker().await;
    let admin = common::admin(&base()).await;
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let key = guard.lease().holder_id.clone();
    let kv = admin.kv_client().get(key.as_str(), None).await.expect("get");
    let lease = kv.kvs().first().expect("key").lease();
    assert_eq!(key, format!("{name}/{lease:x}"));
    assert_eq!(guard.fencing_token(), kv.kvs()[0].create_revision() as u64);
    // Same locker, same name: not reentrant, and a second acquire waits in the process.
    assert!(locker.lock(&name).try_acquire().await.expect("try").is_none());
    let second = tokio::spawn({
        let (locker, name) = (locker.clone(), name.clone());
        async move { locker.lock(&name).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "two holders in one session");
    assert_eq!(
        common::keys_under(&admin, &format!("{name}/")).await,
        std::slice::from_ref(&key)
    );
    let first_token = guard.fencing_token();
    guard.release().await.expect("release");
    let next = within(PATIENCE, "the second attempt", second)
        .await
        .unwrap()
        .expect("acquire");
    assert_eq!(next.lease().holder_id, key, "same session, same key");
    assert!(next.fencing_token() > first_token);
    next.release().await.expect("release");
}

/// The inherited Go prefix pitfall, documented: in this layout a holder of `X/b` blocks `X`
/// (its key lies under `X/`). The default layout does not have it (see the conformance suite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_layout_inherits_the_prefix_pitfall() {
    let base_name = unique_name("compat_pitfall");
    let (a, b) = (go_locker().await, go_locker().await);
    let nested = a.lock(format!("{base_name}/b")).acquire().await.expect("acquire");
    assert!(
        b.lock(&base_name).try_acquire().await.expect("try").is_none(),
        "the pitfall is gone?"
    );
    nested.release().await.expect("release");
    let outer = b.lock(&base_name).try_acquire().await.expect("try").expect("free");
    outer.release().await.expect("release");
}

/// In this layout a session has one key name per lock, so the next attempt reuses the name of a
/// key whose create request failed (its outcome unknown). The sweeper deletes such a key again for
/// a while, in case etcd applies the request late; it must not delete the key of a later attempt
/// that holds the lock. Through a proxy that freezes while a `try_acquire` is in flight (the
/// request times out, and etcd applies it once the proxy forwards again), then an `acquire` that
/// holds for more than a TTL: before, the sweeper deleted the holder's key (`lost()` fired and
/// another locker took the lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_create_does_not_make_the_sweeper_delete_a_later_holder_s_key() {
    use locksmith_core::conformance::proxy::{Mode, Proxy};

    let name = unique_name("compat_suspect");
    let upstream = common::endpoints(&base())[0].trim_start_matches("http://").to_owned();
    let proxy = Proxy::start(&upstream).await;
    let url = format!("etcd://{}?layout=go-mutex&ttl=2s&request_timeout=300ms", proxy.addr());
    let locker = locksmith_etcd::connect(&BackendUrl::parse(&url).expect("url"))
        .await
        .expect("connect");
    let other = go_locker().await;

    proxy.set(Mode::FREEZE);
    let failed = locker.lock(&name).try_acquire().await;
    assert!(matches!(failed, Err(LockError::Unavailable { .. })), "{failed:?}");
    proxy.set(Mode::Forward);
    tokio::time::sleep(Duration::from_secs(1)).await; // the failed attempt's clean-up has run

    let guard = within(PATIENCE, "acquire", locker.lock(&name).acquire())
        .await
        .expect("acquire");
    tokio::time::sleep(Duration::from_secs(3)).await; // six sweeps, a suspect key rechecked at each
    assert!(guard.is_held(), "lost: {:?}", guard.lost_reason());
    assert!(
        other.lock(&name).try_acquire().await.expect("try").is_none(),
        "another locker took the lock while it was held"
    );
    guard.release().await.expect("release");
    locker.shutdown().await.expect("shutdown");
}

/// In this layout without a URL path every `NAME/` is a lock's queue, so a guarded key with a `/`
/// may queue as a contender that never leaves: such keys are refused (the lock's own key
/// included), but for the data keys. Before, `put("NAME/cursor")` landed and blocked lock `NAME`
/// for every client, locksmith and `etcdctl lock` alike, once its holder released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_keys_that_may_lie_in_a_lock_queue_are_refused() {
    let name = unique_name("compat_guarded");
    let (locker, other) = (go_locker().await, go_locker().await);
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let own_key = guard.lease().holder_id.clone();
    for key in [format!("{name}/cursor"), own_key] {
        let put = guard.guarded().put(&key, "x").await;
        assert!(matches!(put, Err(LockError::InvalidName(_))), "{key}: {put:?}");
        let deleted = guard.guarded().delete(&key).await;
        assert!(matches!(deleted, Err(LockError::InvalidName(_))), "{key}: {deleted:?}");
    }
    let data = guard.data_key("cursor").expect("data key");
    guard.guarded().put(&data, "1").await.expect("a data key is writable");
    let flat = name.replace('/', "-");
    guard
        .guarded()
        .put(&flat, "1")
        .await
        .expect("a key without '/' is writable");
    guard.release().await.expect("release");
    let next = within(PATIENCE, "the next holder", other.lock(&name).acquire())
        .await
        .expect("nothing blocks the lock");
    next.release().await.expect("release");
    // The data keys lie in the queue of the locks `.data` and `.data/…`, which could never be
    // granted: refused. (Before, `try_acquire` answered "held" for good.)
    let segment = data
        .trim_start_matches(".data/")
        .split('/')
        .next()
        .expect("a segment")
        .to_owned();
    for reserved in [".data".to_owned(), format!(".data/{segment}")] {
        let attempt = other.lock(&reserved).try_acquire().await;
        assert!(
            matches!(attempt, Err(LockError::InvalidName(_))),
            "{reserved}: {attempt:?}"
        );
        let look = other.inspect(&reserved).await;
        assert!(matches!(look, Err(LockError::InvalidName(_))), "{reserved}: {look:?}");
    }
}
