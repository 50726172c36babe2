//! Connections that go silent without closing (a flow a NAT or firewall dropped, while new
//! connections still work): the locker notices, drops them and opens new ones. A proxy between
//! a locker and the server freezes the connections open at one moment and forwards the new ones
//! (`Mode::FreezeExisting`).

#[allow(dead_code)] // only the server URL
mod common;

use std::time::Duration;

use locksmith_core::conformance::proxy::{Mode, Proxy};
use locksmith_core::conformance::sockets::{self, local_ports_connected_to};
use locksmith_core::conformance::{unique_name, until_waiters, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::{LockGuard, Locker};
use tokio::time::Instant;

/// The TTL of the locks.
const TTL: Duration = Duration::from_secs(3);

/// A schema of its own, a locker connected to the server directly and a proxy in front of the
/// server, with the URL of a locker behind it (`ttl=3s`, `request_timeout=1s`).
async fn setup() -> (Locker, Proxy, BackendUrl) {
    let base = common::server_url();
    let url = BackendUrl::parse(&base).unwrap();
    let proxy = Proxy::start(&url.hosts[0].to_addr(5432)).await;
    let (user, password) = url.credentials.clone().unwrap_or_default();
    let password = password.unwrap_or_default();
    let (db, schema) = (url.path.clone(), format!("t_{:016x}", rand::random::<u64>()));
    let sep = if base.contains('?') { '&' } else { '?' };
    let direct = format!("{base}{sep}schema={schema}&ttl=3s");
    let direct = locksmith_postgres::connect(&BackendUrl::parse(&direct).unwrap())
        .await
        .unwrap();
    let proxied = format!(
        "postgres://{user}:{password}@{}/{db}?schema={schema}&ttl=3s&request_timeout=1s&connect_timeout=1s",
        proxy.addr()
    );
    (direct, proxy, BackendUrl::parse(&proxied).unwrap())
}

/// Lock `name` of `locker`, taken again after each failure (a step on a frozen connection times
/// out, and the next opens a new one).
async fn acquire(locker: &Locker, name: &str) -> LockGuard {
    for _ in 0..5 {
        match locker.lock(name).acquire().await {
            Ok(guard) => return guard,
            Err(e) => eprintln!("acquire failed, again: {e}"),
        }
    }
    panic!("{name}: not acquired in 5 attempts");
}

/// Bug: a renewal that got no answer left the leases connection in place, and every later
/// renewal waited behind it: every lease of the locker was lost one TTL after it was taken,
/// while new acquires worked. Now the connection is dropped and the next renewal opens another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_outlive_a_silent_leases_connection() {
    let (_direct, proxy, url) = setup().await;
    let locker = locksmith_postgres::connect(&url).await.unwrap();
    let _first = locker.lock(unique_name("first")).ttl(TTL).acquire().await.unwrap();
    proxy.set(Mode::FreezeExisting);
    // The held lock may be lost meanwhile (its renewals wait for a request timeout first).
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    let guard = acquire(&locker, &unique_name("second")).await;
    let started = Instant::now();
    tokio::select! {
        reason = guard.lost() => panic!("lost after {:?}: {reason}", started.elapsed()),
        _ = tokio::time::sleep(TTL * 3) => {}
    }
    assert!(guard.is_held(), "held for three TTLs");
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// Bug: a LISTEN connection gone silent was never noticed (nothing is sent on it), so the
/// notification that granted the second waiter in line (which has no timer of its own) never
/// came, and it waited on forever. Now a probe finds the connection dead, the hub listens on a
/// new one and every waiter takes a step.
///
/// Holder H (direct) holds; waiters W1 and W2 of the proxied locker queue behind it, W2 second;
/// every connection of that locker goes silent. The steps and leases connections are replaced
/// on their first timeout (a beat times out within a second or two, then a step); the LISTEN one
/// only by its probe. H releases: the first waiter in line gets the lock (at the latest by its
/// own timer, the holder's expiry) and releases it at once, which grants the other in its
/// transaction; that one must hold soon after. (The waiters may swap places meanwhile: a
/// waiter whose locker's owner row expired while its beats timed out joins again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_granted_after_its_listen_connection_went_silent() {
    let (direct, proxy, url) = setup().await;
    let name = unique_name("listen");
    let holder = direct.lock(&name).ttl(TTL).acquire().await.unwrap();
    let locker = locksmith_postgres::connect(&url).await.unwrap();
    let mut waiters = Vec::new();
    for queued in 1..=2 {
        let (locker, lock) = (locker.clone(), name.clone());
        waiters.push(tokio::spawn(async move {
            let guard = locker.lock(&lock).ttl(TTL).acquire().await.unwrap();
            guard.release().await.unwrap();
        }));
        until_waiters(&direct, &name, queued, Duration::from_secs(5)).await;
    }
    proxy.set(Mode::FreezeExisting);
    // Long enough for the steps and leases connections to be replaced.
    tokio::time::sleep(Duration::from_secs(6)).await;
    holder.release().await.unwrap();
    let released = Instant::now();
    within(Duration::from_secs(10), "both waiters held the lock in turn", async {
        for waiter in waiters {
            waiter.await.unwrap();
        }
    })
    .await;
    eprintln!("both waiters held the lock {:?} after H released", released.elapsed());
    locker.shutdown().await.unwrap();
    direct.shutdown().await.unwrap();
}

/// Bug: an election's observer read the queue on the steps' connection with no time limit, the
/// connection's lock held meanwhile: once that connection went silent, the observer's next read
/// (at the leader's expiry, or when the LISTEN connection was replaced) never returned, and
/// every later step of its locker (acquires, releases, the shutdown) waited behind it for ever.
/// Now the read is bounded by the request timeout and drops the connection, as a step does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_go_on_after_an_observer_read_on_a_silent_connection() {
    let (direct, proxy, url) = setup().await;
    let election = unique_name("observed");
    let leader = direct
        .election(&election)
        .campaign("direct")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap();
    let locker = locksmith_postgres::connect(&url).await.unwrap();
    let _watch = locker.election(&election).observe().await.unwrap();
    proxy.set(Mode::FreezeExisting);
    // The observer reads again at the leader's expiry (it was renewed meanwhile).
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    let name = unique_name("after-observer");
    let granted = within(Duration::from_secs(15), "an acquire after the observer's read", async {
        loop {
            match locker
                .lock(&name)
                .ttl(TTL)
                .timeout(Duration::from_secs(3))
                .acquire()
                .await
            {
                Ok(guard) => return guard,
                Err(e) => eprintln!("acquire failed, again: {e}"),
            }
        }
    })
    .await;
    granted.release().await.unwrap();
    leader.resign().await.unwrap();
    locker.shutdown().await.unwrap();
    direct.shutdown().await.unwrap();
}

/// Bug: the removal of a cancelled acquire's entry was tried once. Cut off by an outage, it left
/// the entry queued while its locker's owner row lived (a join beats for the entry's TTL): the
/// next release granted the lock to the entry, which nobody renewed or released, and the lock
/// stayed taken for that whole TTL. Now the removal is tried again until the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_cut_off_by_an_outage_leaves_nothing() {
    let (direct, proxy, url) = setup().await;
    let name = unique_name("leftover");
    let holder = direct.lock(&name).ttl(TTL).acquire().await.unwrap();
    let locker = locksmith_postgres::connect(&url).await.unwrap();
    let waiter = {
        let (locker, name) = (locker.clone(), name.clone());
        tokio::spawn(async move {
            let attempt = locker
                .lock(&name)
                .ttl(Duration::from_secs(30))
                .timeout(Duration::from_secs(2));
            attempt.acquire().await
        })
    };
    until_waiters(&direct, &name, 1, Duration::from_secs(5)).await;
    // The waiter's deadline and its removal's first try fall in the outage.
    proxy.set(Mode::Cut);
    let ended = within(Duration::from_secs(10), "the waiter's acquire ends", waiter).await;
    assert!(ended.unwrap().is_err(), "the waiter acquired during the outage");
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.set(Mode::Forward);
    tokio::time::sleep(Duration::from_secs(3)).await;
    holder.release().await.unwrap();
    let freed = within(
        Duration::from_secs(5),
        "the lock free after its holder released",
        async {
            loop {
                if let Some(guard) = direct.lock(&name).ttl(TTL).try_acquire().await.unwrap() {
                    return guard;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        },
    )
    .await;
    freed.release().await.unwrap();
    locker.shutdown().await.unwrap();
    direct.shutdown().await.unwrap();
}

/// Bug: a step whose connection went silent mid-transaction (its `lock_row` answered on the
/// server, the answer lost on the way) left a session "idle in transaction" on the server,
/// holding the lock's row: every later step on that lock, by any client, waited behind it until
/// the server's TCP gave up (minutes to hours). Now sessions set
/// `idle_in_transaction_session_timeout`, and the server ends such a session by itself.
///
/// Holder H (direct) abandons its lock; waiter W (proxied) is first in line. Another session
/// holds the lock's row when H's lease runs out, so W's step waits for the row; the proxy
/// freezes W's connections, and the row is let go: W's transaction goes on on the server, its
/// answers lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_cut_off_mid_transaction_does_not_keep_the_lock_s_row() {
    let (direct, proxy, url) = setup().await;
    let schema = url.query["schema"].clone();
    let name = unique_name("idle-in-transaction");
    let held = direct.lock(&name).ttl(TTL).acquire().await.unwrap();
    let proxied = locksmith_postgres::connect(&url).await.unwrap();
    let waiter = proxied.clone();
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move {
            waiter
                .lock(&name)
                .ttl(TTL)
                .timeout(Duration::from_secs(40))
                .acquire()
                .await
        })
    };
    within(
        Duration::from_secs(10),
        "W queued",
        until_waiters(&direct, &name, 1, Duration::from_secs(10)),
    )
    .await;
    let admin = common::hold_row(&schema, &name).await;
    let _ = held.abandon();
    // W's step (after H's TTL) waits for the row, behind the admin's session.
    let blocked_by_admin = "SELECT count(*) FROM pg_stat_activity \
                            WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))";
    within(Duration::from_secs(15), "W's step waiting for the row", async {
        loop {
            let n: i64 = admin.query_one(blocked_by_admin, &[]).await.unwrap().get(0);
            if n > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    proxy.set(Mode::FreezeExisting);
    admin.batch_execute("COMMIT").await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("W was not granted in 20 s: a session cut off mid-transaction keeps the lock's row")
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
    proxied.shutdown().await.unwrap();
}

/// A connection given up on because a request on it got no answer is closed at once, its socket
/// with it (and with a reset: `lost_answers.rs`): not left open while its task waits for the
/// answers, with TCP delivering the requests whenever the network lets them through, after the
/// clean-up that went over a new connection. Every connection of a locker behind a proxy goes
/// silent; its steps and renewals get no answer; within a few request timeouts none of the
/// sockets it had is open any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_given_up_on_is_closed_at_once() {
    let (direct, proxy, url) = setup().await;
    let proxy_port: u16 = proxy.addr().rsplit(':').next().unwrap().parse().unwrap();
    let locker = locksmith_postgres::connect(&url).await.unwrap();
    let _held = locker.lock(unique_name("given-up")).ttl(TTL).acquire().await.unwrap();
    let before = local_ports_connected_to(proxy_port);
    assert!(!before.is_empty(), "the locker's connection: {before:?}");
    proxy.set(Mode::FreezeExisting);
    // A step on the silent connection (the renewals and the probe meet it too).
    let _ = locker.lock(unique_name("given-up-2")).try_acquire().await;
    sockets::until_closed(proxy_port, &before, Duration::from_secs(15)).await;
    locker.shutdown().await.unwrap();
    direct.shutdown().await.unwrap();
}

/// `layout=advisory`: the server ended the session that holds a lock's advisory lock (an
/// operator's `pg_terminate_backend`, the server's TCP keepalive) while that connection was cut
/// without a close reaching the client. The server freed the advisory lock for any session, so
/// the holder must be told. (Before, nothing was ever sent on that session: its end went unseen,
/// the renewals went on succeeding on a new leases connection, and the guard held on for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advisory_session_ended_unseen_tells_its_holder() {
    let (_direct, proxy, mut url) = setup().await;
    url.query.insert("layout".into(), "advisory".into());
    let locker = locksmith_postgres::connect(&url).await.unwrap();
    // A key of its own, small enough to be pg_locks.objid with classid = 0.
    let key = i64::from(rand::random::<u32>() >> 2) + 1;
    // A TTL long against the request timeout (1 s): the leases connection is frozen too, and the
    // renewal that finds it silent must leave time for the next one on a new connection.
    let ttl = TTL * 3;
    let guard = locker.lock(key.to_string()).ttl(ttl).acquire().await.unwrap();
    proxy.set(Mode::FreezeExisting);
    let ended = common::query_as_owner(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = {key}"
    ))
    .await;
    assert_eq!(ended, ["t"], "one session held it");
    within(Duration::from_secs(5), "the advisory lock freed on the server", async {
        let free = format!("SELECT pg_try_advisory_lock({key})");
        while common::query_as_owner(&free).await != ["t"] {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let reason = tokio::time::timeout(ttl * 2, guard.lost())
        .await
        .expect("the holder was not told that its advisory lock's session ended");
    assert!(reason.to_string().contains("unseen by this client"), "{reason}");
    assert!(!guard.is_held());
    drop(guard);
    let _ = locker.shutdown().await;
}
